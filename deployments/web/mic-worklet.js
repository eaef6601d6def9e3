// The microphone as the Realtime protocol wants it: 24 kHz PCM16 mono, in 20 ms frames.
// The AudioContext runs at 24 kHz, so the browser resamples the microphone before this.
class MicCapture extends AudioWorkletProcessor {
  constructor() {
    super();
    this.frame = new Int16Array(480);
    this.filled = 0;
  }

  process(inputs) {
    const channel = inputs[0] && inputs[0][0];
    if (!channel) return true;
    let peak = 0;
    for (let i = 0; i < channel.length; i++) {
      const sample = Math.max(-1, Math.min(1, channel[i]));
      peak = Math.max(peak, Math.abs(sample));
      this.frame[this.filled++] = sample * 0x7fff;
      if (this.filled === this.frame.length) {
        this.port.postMessage({ pcm: this.frame.buffer.slice(0), peak });
        this.filled = 0;
        peak = 0;
      }
    }
    return true;
  }
}

registerProcessor("mic-capture", MicCapture);

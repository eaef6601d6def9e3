// A microphone the test speaks into when an event says so (the answer is sounding), instead of
// a file played from a fixed time: getUserMedia hands the page a Web Audio stream, and
// window.scriptedMicrophone.say(base64 PCM16, rate) plays a clip into it now, returning when
// (performance.now()) it began. Silence otherwise, as from a quiet room.
(() => {
  let context = null;
  let destination = null;
  window.scriptedMicrophone = {
    say(b64, rate) {
      const binary = atob(b64);
      const pcm = new Int16Array(binary.length / 2);
      for (let i = 0; i < pcm.length; i++) pcm[i] = binary.charCodeAt(2 * i) | (binary.charCodeAt(2 * i + 1) << 8);
      const buffer = context.createBuffer(1, pcm.length, rate);
      const samples = buffer.getChannelData(0);
      for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 0x8000;
      const source = context.createBufferSource();
      source.buffer = buffer;
      source.connect(destination);
      source.start();
      return performance.now();
    },
  };
  navigator.mediaDevices.getUserMedia = async () => {
    context = new AudioContext();
    await context.resume();
    destination = context.createMediaStreamDestination();
    // A source that always plays (zeros): with none, the track sends no frames between clips,
    // and over WebRTC the server then hears no end of speech.
    const quiet = context.createConstantSource();
    quiet.offset.value = 0;
    quiet.connect(destination);
    quiet.start();
    return destination.stream;
  };
})();

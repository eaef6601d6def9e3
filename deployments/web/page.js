// The voice page: the microphone to /v1/realtime over a WebSocket, the answer played back.
// Everything here ships with the server (no CDN). window.s2s holds the page's own counters,
// which the browser tests read.

const RATE = 24000;
const JITTER_S = 0.08; // a little audio in hand before playback starts: smooths network jitter

const $ = (id) => document.getElementById(id);
const stats = { sentMs: 0, receivedMs: 0, playedMs: 0, responses: 0, stops: [], errors: [] };
window.s2s = { stats, connected: false };

let socket = null;
let context = null;
let microphone = null;
let playing = null; // { itemId, chunks: [{ source, start, duration }] } of the answer being played
let nextStart = 0;

$("url").value = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/realtime`;

$("connect-form").addEventListener("submit", (event) => {
  event.preventDefault();
  if (socket) disconnect();
  else connect().catch((error) => showError(`could not connect: ${error.message || error}`));
});

async function connect() {
  hideError();
  context = new AudioContext({ sampleRate: RATE });
  await context.resume();
  await context.audioWorklet.addModule("/static/mic-worklet.js");
  microphone = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
  });
  const capture = new AudioWorkletNode(context, "mic-capture");
  const silent = context.createGain();
  silent.gain.value = 0; // the worklet runs only when it leads to the output
  context.createMediaStreamSource(microphone).connect(capture).connect(silent).connect(context.destination);
  const key = $("key").value.trim();
  const protocols = key ? ["realtime", `openai-insecure-api-key.${key}`] : ["realtime"];
  socket = new WebSocket($("url").value, protocols);
  socket.onopen = () => setStatus("Connected: speak");
  socket.onmessage = (message) => onEvent(JSON.parse(message.data));
  socket.onclose = (close) => {
    const why = close.code === 1000 || close.code === 1005 ? "" : ` (${close.code} ${close.reason})`;
    if (close.code === 1006 && !window.s2s.connected) showError("the server refused the connection (wrong path, key or origin?)");
    teardown(`Disconnected${why}`);
  };
  capture.port.onmessage = ({ data }) => {
    $("level").value = data.peak;
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify({ type: "input_audio_buffer.append", audio: toBase64(data.pcm) }));
      stats.sentMs += (data.pcm.byteLength / 2 / RATE) * 1000;
    }
  };
  $("connect").textContent = "Disconnect";
}

function disconnect() {
  if (socket) socket.close(1000);
  teardown("Disconnected");
}

function teardown(status) {
  stopPlayback(false);
  socket = null;
  window.s2s.connected = false;
  if (microphone) microphone.getTracks().forEach((track) => track.stop());
  if (context) context.close();
  microphone = context = null;
  $("connect").textContent = "Connect";
  setStatus(status);
}

function onEvent(event) {
  switch (event.type) {
    case "session.created":
      window.s2s.connected = true;
      setStatus(`Connected to ${event.session.model}: speak`);
      break;
    case "input_audio_buffer.speech_started":
      window.s2s.lastSpeechStartedAt = performance.now();
      stopPlayback(true); // barge-in: silence at once, and tell the server what was heard
      bubble(event.item_id, "user").textContent = "…";
      break;
    case "conversation.item.input_audio_transcription.delta":
      appendText(event.item_id, "user", event.delta);
      break;
    case "conversation.item.input_audio_transcription.completed":
      bubble(event.item_id, "user").textContent = event.transcript || "(no words heard)";
      break;
    case "response.output_audio_transcript.delta":
    case "response.output_text.delta":
      appendText(event.item_id, "assistant", event.delta);
      break;
    case "response.output_audio.delta":
      play(event.item_id, event.delta);
      break;
    case "response.done":
      stats.responses += 1;
      if (event.response.status === "cancelled") stopPlayback(false);
      if (event.response.status === "failed") showError(`the answer failed: ${event.response.status_details?.error?.code}`);
      break;
    case "error":
      stats.errors.push(event.error.code);
      showError(`${event.error.message} (${event.error.code})`);
      break;
  }
}

function play(itemId, b64) {
  const pcm = new Int16Array(fromBase64(b64));
  const buffer = context.createBuffer(1, pcm.length, RATE);
  const samples = buffer.getChannelData(0);
  for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 0x8000;
  if (!playing || playing.itemId !== itemId) playing = { itemId, chunks: [] };
  const source = context.createBufferSource();
  source.buffer = buffer;
  source.connect(context.destination);
  const start = Math.max(nextStart, context.currentTime + JITTER_S);
  source.start(start);
  nextStart = start + buffer.duration;
  playing.chunks.push({ source, start, duration: buffer.duration });
  stats.receivedMs += buffer.duration * 1000;
  source.onended = () => {
    if (!source.stopped) stats.playedMs += buffer.duration * 1000;
  };
}

function stopPlayback(report) {
  if (!playing) return;
  const now = context ? context.currentTime : 0;
  let heard = 0;
  let cut = false;
  for (const chunk of playing.chunks) {
    const played = Math.min(Math.max(now - chunk.start, 0), chunk.duration);
    heard += played;
    if (played < chunk.duration) {
      cut = true;
      chunk.source.stopped = true;
      stats.playedMs += played * 1000;
      chunk.source.stop();
    }
  }
  if (cut && report && window.s2s.lastSpeechStartedAt) stats.stops.push(performance.now() - window.s2s.lastSpeechStartedAt);
  if (cut && report && socket && socket.readyState === WebSocket.OPEN) {
    const truncate = { type: "conversation.item.truncate", item_id: playing.itemId, content_index: 0 };
    socket.send(JSON.stringify({ ...truncate, audio_end_ms: Math.floor(heard * 1000) }));
    bubble(playing.itemId, "assistant").classList.add("cut");
  }
  playing = null;
  nextStart = 0;
}

function bubble(itemId, role) {
  let entry = document.getElementById(`item-${itemId}`);
  if (!entry) {
    entry = document.createElement("li");
    entry.id = `item-${itemId}`;
    entry.className = role;
    entry.dataset.role = role;
    $("transcript").appendChild(entry);
    entry.scrollIntoView({ block: "end" });
  }
  return entry;
}

function appendText(itemId, role, text) {
  const entry = bubble(itemId, role);
  if (entry.textContent === "…") entry.textContent = "";
  entry.textContent += text;
}

function setStatus(text) {
  $("status").textContent = text;
}

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = false;
}

function hideError() {
  $("error").hidden = true;
}

function toBase64(buffer) {
  const bytes = new Uint8Array(buffer);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

function fromBase64(b64) {
  const binary = atob(b64);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes.buffer;
}

// The voice page: the microphone to the server and the answer played back, over WebRTC
// (POST /v1/realtime/calls: the server plays the audio and stops it on a barge-in) or a
// WebSocket (/v1/realtime: the page plays the audio deltas and stops them itself).
// Everything here ships with the server (no CDN). window.s2s holds the page's own counters,
// which the browser tests read.

const RATE = 24000;
const JITTER_S = 0.08; // a little audio in hand before playback starts: smooths network jitter

const $ = (id) => document.getElementById(id);
const stats = { sentMs: 0, receivedMs: 0, playedMs: 0, created: 0, responses: 0, cancelled: 0, stops: [], errors: [], sounding: [], lastSoundAt: 0, doneAt: [], mostAheadMs: 0, timings: [] };
// stops: per barge-in, ms from speech_started to the last sound of the interrupted answer
// (0 or less: it was silent already, paused by the server at the speech's onset);
// created, responses: response.created and response.done seen (one more created: an answer
// is still coming); doneAt: when each response.done came; mostAheadMs: the most answer
// audio the page ever held unplayed (a paced answer: about the server's lead).
// sounding: [from, to] of each stretch of answer audio heard (or scheduled to be), and
// lastSoundAt: of its last sound; window.s2s.lastSpeechStartedAt: of the last speech_started.
// All performance.now() times.
// sessionId, resumes: the session's id and how many times its socket was resumed.
window.s2s = { stats, connected: false, resumes: 0 };

// A dropped WebSocket resumes its session (same id, settings and conversation) with the
// resume token of its last session.created; these are the waits before each try (about 40 s
// in all, well inside the server's resume window), and the conversation stays on screen.
const RESUME_DELAYS_MS = [0, 250, 500, 1000, 2000, 4000, 8000, 8000, 8000, 8000];
const NOT_RESUMED = new Set([1000, 1008]); // closed by us, or a policy (resumed elsewhere, access)
let resumeToken = null;
let leaving = false; // the user hung up: nothing to resume

let socket = null; // { send(text), close() } over either transport
let peer = null;
let answerGain = null; // over WebRTC: the volume of what the server plays
let context = null;
let microphone = null;
let playing = null; // { itemId, chunks: [{ source, start, duration }] } of the answer being played
let nextStart = 0;
const interrupted = new Set(); // answers a barge-in cut: their late audio is dropped

// The API beside the page, wherever the app is mounted (Serve's route_prefix: /voice/ talks
// to /voice/v1/realtime).
const realtimeUrl = new URL("v1/realtime", location.href);
realtimeUrl.protocol = location.protocol === "https:" ? "wss:" : "ws:";
$("url").value = realtimeUrl.href;
if (!window.RTCPeerConnection) $("transport").value = "websocket";
const params = new URLSearchParams(location.search);
if (params.get("transport")) $("transport").value = params.get("transport");

$("connect-form").addEventListener("submit", (event) => {
  event.preventDefault();
  if (socket) disconnect();
  else connect().catch((error) => showError(`could not connect: ${error.message || error}`));
});

async function connect() {
  hideError();
  leaving = false;
  resumeToken = null;
  context = new AudioContext({ sampleRate: RATE });
  await context.resume();
  await context.audioWorklet.addModule(new URL("mic-worklet.js", import.meta.url));
  microphone = await navigator.mediaDevices.getUserMedia({
    audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
  });
  const capture = new AudioWorkletNode(context, "mic-capture");
  const silent = context.createGain();
  silent.gain.value = 0; // the worklet runs only when it leads to the output
  context.createMediaStreamSource(microphone).connect(capture).connect(silent).connect(context.destination);
  const key = await clientSecret($("key").value.trim());
  window.s2s.transport = $("transport").value;
  if (window.s2s.transport === "webrtc") {
    capture.port.onmessage = ({ data }) => ($("level").value = data.peak); // audio goes on the track
    await call(key);
  } else {
    openSocket(key);
    capture.port.onmessage = ({ data }) => {
      $("level").value = data.peak;
      if (socket && socket.open()) {
        socket.send(JSON.stringify({ type: "input_audio_buffer.append", audio: toBase64(data.pcm) }));
        stats.sentMs += (data.pcm.byteLength / 2 / RATE) * 1000;
      }
    };
  }
  $("connect").textContent = "Disconnect";
}

function openSocket(key, attempt = 0) {
  const protocols = key ? ["realtime", `openai-insecure-api-key.${key}`] : ["realtime"];
  const url = new URL($("url").value);
  url.searchParams.set("drain_notice", "1"); // told of a drain (session.draining), it moves when idle
  if (resumeToken) url.searchParams.set("resume_token", resumeToken);
  const ws = new WebSocket(url.href, protocols);
  let opened = false;
  ws.onopen = () => (opened = true);
  socket = {
    send: (text) => ws.send(text),
    close: () => ws.close(1000),
    move: () => ws.close(4000, "moving off a draining server"),
    open: () => ws.readyState === WebSocket.OPEN,
  };
  ws.onmessage = (message) => onEvent(JSON.parse(message.data));
  ws.onclose = (close) => {
    const next = opened ? 0 : attempt + 1; // a socket that never opened was refused, or found no server
    if (!leaving && resumeToken && !NOT_RESUMED.has(close.code) && next < RESUME_DELAYS_MS.length) {
      return resumeLater(key, next);
    }
    const why = close.code === 1000 || close.code === 1005 ? "" : ` (${close.code} ${close.reason})`;
    if (close.code === 1006 && !opened) showError(resumeToken ? "the session could not be resumed" : "the server refused the connection (wrong path, key or origin?)");
    teardown(`Disconnected${why}`);
  };
}

function resumeLater(key, attempt) {
  stopPlayback(false); // the answer in flight ended with the socket: the server never resends it
  window.s2s.connected = false;
  setStatus("reconnecting…");
  setTimeout(() => leaving || openSocket(key, attempt), RESUME_DELAYS_MS[attempt]);
}

// Told that its server replica is being replaced: move between answers, not in one.
function moveIfDraining() {
  if (window.s2s.draining && stats.created === stats.responses && socket && socket.move) {
    window.s2s.draining = false;
    socket.move();
  }
}

// The page holds a short-lived client secret, never the API key: a secret typed in (ek_…, made
// by your backend: POST /v1/realtime/client_secrets) is used as it is; a key typed in (a local
// try) is traded at once for a secret, and forgotten. A dropped session resumes with its token.
async function clientSecret(typed) {
  if (!typed || typed.startsWith("ek_")) return typed;
  const made = await fetch(`${api()}/client_secrets`, {
    method: "POST",
    headers: { Authorization: `Bearer ${typed}`, "Content-Type": "application/json" },
    body: "{}",
  });
  const body = await made.json().catch(() => ({}));
  if (!made.ok) throw new Error(body.error?.message || `the key was refused (${made.status})`);
  return body.value;
}

function api() {
  return $("url").value.replace(/^ws/, "http").replace(/\/v1\/realtime.*$/, "/v1/realtime");
}

// WebRTC: the microphone as an Opus track, events on the "oai-events" data channel, the
// answer on the server's track. The page only listens: the server stops it on a barge-in.
async function call(key) {
  const auth = key ? { Authorization: `Bearer ${key}` } : {};
  // The STUN/TURN servers the server was given (none on a local machine: host candidates do).
  const ice = await fetch(`${api()}/ice-servers`, { headers: auth });
  peer = new RTCPeerConnection({ iceServers: ice.ok ? await ice.json() : [] });
  microphone.getTracks().forEach((track) => peer.addTrack(track, microphone));
  const channel = peer.createDataChannel("oai-events");
  socket = { send: (text) => channel.send(text), close: () => peer && peer.close(), open: () => channel.readyState === "open" };
  channel.onmessage = (message) => onEvent(JSON.parse(message.data));
  channel.onclose = () => teardown("Disconnected");
  peer.ontrack = ({ track }) => listen(new MediaStream([track]));
  peer.onconnectionstatechange = () => {
    if (peer && ["failed", "closed"].includes(peer.connectionState)) teardown(`Disconnected (${peer.connectionState})`);
  };
  await peer.setLocalDescription(await peer.createOffer());
  await new Promise((done) => {
    if (peer.iceGatheringState === "complete") return done();
    peer.onicegatheringstatechange = () => peer.iceGatheringState === "complete" && done();
  });
  const headers = { "Content-Type": "application/sdp", ...auth };
  const reply = await fetch(`${api()}/calls`, { method: "POST", body: peer.localDescription.sdp, headers });
  if (!reply.ok) {
    const refusal = await reply.json().catch(() => ({}));
    throw new Error(refusal.error ? refusal.error.message : `HTTP ${reply.status}`);
  }
  await peer.setRemoteDescription({ type: "answer", sdp: await reply.text() });
}

// What the server plays: through a gain node, so that a barge-in silences it at once (the
// server stops sending too, but what is already on the wire and in the browser's jitter buffer
// would still play for up to a second), and unmuted when the next answer starts. Chrome feeds
// a remote track to Web Audio only while a media element plays it, so a muted one does.
// The analyser listens after the gain: the page's counters are what the user hears.
function listen(stream) {
  const element = new Audio();
  element.muted = true;
  element.srcObject = stream;
  element.play();
  answerGain = context.createGain();
  const analyser = context.createAnalyser();
  context.createMediaStreamSource(stream).connect(answerGain).connect(analyser).connect(context.destination);
  const samples = new Float32Array(analyser.fftSize);
  const tick = setInterval(() => {
    if (!context || context.state === "closed") return clearInterval(tick);
    analyser.getFloatTimeDomainData(samples);
    const sounding = samples.some((sample) => Math.abs(sample) > 0.01);
    if (sounding) {
      stats.playedMs += 20;
      stats.lastSoundAt = performance.now();
      sounded(stats.lastSoundAt - 20, stats.lastSoundAt);
    }
    const bargeIn = window.s2s.bargeIn;
    if (bargeIn && sounding) bargeIn.lastSound = performance.now();
    if (bargeIn && performance.now() - bargeIn.at > 3000) settleBargeIn(); // no new answer came
  }, 20);
}

function muteAnswer(muted) {
  if (answerGain) answerGain.gain.value = muted ? 0 : 1;
}

function disconnect() {
  leaving = true;
  if (socket) socket.close();
  teardown("Disconnected");
}

function teardown(status) {
  stopPlayback(false);
  socket = null;
  if (peer) peer.close();
  peer = answerGain = null;
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
      if (window.s2s.sessionId === event.session.id) window.s2s.resumes += 1;
      window.s2s.sessionId = event.session.id;
      resumeToken = event.session.resume_token || null;
      window.s2s.connected = true;
      stats.created = stats.responses; // the answer in flight when the socket went is over
      setStatus(`Connected to ${event.session.model}${window.s2s.resumes ? " (resumed)" : ""}: speak`);
      break;
    case "session.draining":
      window.s2s.draining = true;
      moveIfDraining();
      break;
    case "input_audio_buffer.speech_started":
    {
      const at = (window.s2s.lastSpeechStartedAt = performance.now());
      const answer = stats.created > stats.responses && playing ? playing.itemId : null;
      const cut = stopPlayback(true); // barge-in: silence at once, and tell the server what was heard
      if (cut) {
        interrupted.add(cut);
        stats.stops.push(performance.now() - at);
      } else if (peer && window.s2s.serverPlaying) {
        muteAnswer(true); // the server stops it too; the page silences what is still on its way
        window.s2s.bargeIn = { at, lastSound: at }; // listen for any sound until the next answer
      } else if (answer) {
        // Paced: the server stopped sending at the speech's onset, so the answer had fallen
        // silent before this confirmation (a stop of 0 or less); nothing more of it plays.
        interrupted.add(answer);
        stats.stops.push(stats.lastSoundAt - at);
      }
      bubble(event.item_id, "user").textContent = "…";
      break;
    }
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
    case "output_audio_buffer.started":
      if (window.s2s.bargeIn) settleBargeIn(); // the next answer plays: the old one is over
      muteAnswer(false);
      window.s2s.serverPlaying = true;
      break;
    case "output_audio_buffer.stopped":
    case "output_audio_buffer.cleared":
      window.s2s.serverPlaying = false;
      break;
    case "response.created":
      stats.created += 1;
      break;
    case "response.done":
      stats.responses += 1;
      stats.doneAt.push(performance.now());
      showTimings(event.response);
      if (event.response.status === "cancelled") {
        stats.cancelled += 1;
        (event.response.output || []).forEach((item) => bubble(item.id, "assistant").classList.add("cut"));
        stopPlayback(false);
      }
      if (event.response.status === "failed") showError(`the answer failed: ${event.response.status_details?.error?.code}`);
      moveIfDraining();
      break;
    case "error":
      stats.errors.push(event.error.code);
      showError(`${event.error.message} (${event.error.code})`);
      break;
  }
}

// Where the turn's time went, as the server tells it in response.done (ms from the end of
// the user's speech: docs/observability.md), under each of the answer's bubbles.
function showTimings(response) {
  const told = response.metadata?.turn_timings;
  if (!told) return;
  const timings = JSON.parse(told);
  stats.timings.push(timings);
  const seconds = (ms) => (ms === undefined ? "–" : `${(ms / 1000).toFixed(2)} s`);
  const text = `voice-to-voice ${seconds(timings.first_audio_ms)} · words ${seconds(timings.transcript_ms)} · first token ${seconds(timings.first_token_ms)}`;
  (response.output || []).forEach((item) => {
    if (item.type === "message") bubble(item.id, "assistant").dataset.timing = text;
  });
}

function settleBargeIn() {
  const { at, lastSound } = window.s2s.bargeIn;
  stats.stops.push(lastSound ? lastSound - at : 0);
  window.s2s.bargeIn = null;
}

function play(itemId, b64) {
  if (interrupted.has(itemId)) return; // late audio of an interrupted answer is never played
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
  stats.mostAheadMs = Math.max(stats.mostAheadMs, (nextStart - context.currentTime) * 1000);
  const startsAt = performance.now() + (start - context.currentTime) * 1000;
  sounded(startsAt, startsAt + buffer.duration * 1000);
  playing.chunks.push({ source, start, duration: buffer.duration });
  stats.receivedMs += buffer.duration * 1000;
  source.onended = () => {
    if (source.stopped) return;
    stats.playedMs += buffer.duration * 1000;
    stats.lastSoundAt = performance.now();
  };
}

// Answer audio sounds from `from` to `to` (ms): joined to the stretch it continues (a pause
// under 0.5 s, as between sentences, is part of it), else a new stretch.
function sounded(from, to) {
  const last = stats.sounding[stats.sounding.length - 1];
  if (last && from - last[1] < 500) last[1] = Math.max(last[1], to);
  else stats.sounding.push([from, to]);
}

// Stop what the page plays; the item it cut (null: nothing was still to play).
function stopPlayback(report) {
  if (!playing) return null;
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
  if (cut && report && socket && socket.open()) {
    const truncate = { type: "conversation.item.truncate", item_id: playing.itemId, content_index: 0 };
    socket.send(JSON.stringify({ ...truncate, audio_end_ms: Math.floor(heard * 1000) }));
    bubble(playing.itemId, "assistant").classList.add("cut");
  }
  const cutItem = cut ? playing.itemId : null;
  playing = null;
  nextStart = 0;
  return cutItem;
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

"""Stand-ins for the socket and the four stages, controlled by the test.

The VAD is the real segmenter on signal energy (``handlers.synthetic``), so tone audio
gives real start/pause/stop boundaries at audio time, not wall time. STT, LLM and TTS are
coroutines and async generators that can be held at a gate, so a test decides exactly
where each stage is when it acts.
"""

import asyncio
import base64
import functools
import json
import time
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any

import numpy as np
from ray.serve.exceptions import RequestCancelledError

from cancel import CancelScope, ScopeTicket
from deployments.config import IngressConfig
from deployments.messages import LLMRequest, TTSRequest
from deployments.metrics import IngressMetrics, SessionMetrics
from deployments.realtime.recording.capture import RecordingRequest
from deployments.realtime.session import RealtimeSession, SessionStart
from deployments.realtime.transports.websocket import WebSocketTransport
from deployments.realtime.transports.wire_audio import WireAudio
from deployments.realtime.turn_taking.config import InterruptionRules
from deployments.session_store.writer import StoredSession
from deployments.telemetry import Carrier
from deployments.voice_activity import VADResult
from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, pcm16_to_float, resample
from handlers.denoise import Denoiser
from handlers.listening import Hearing, Listener
from handlers.synthetic import EnergyVoiceDetector, question_tone


class Gate:
    """Open by default; a closed gate holds whoever comes until it opens."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._event.set()
        self._permits: int | None = None

    def close(self, after: int = 0) -> None:
        """Close now, or once ``after`` more have passed."""
        self._permits = after
        if after == 0:
            self._event.clear()

    def open(self) -> None:
        self._permits = None
        self._event.set()

    async def passage(self) -> None:
        if self._permits is not None:
            if self._permits > 0:
                self._permits -= 1
                return
            self._event.clear()
        await self._event.wait()


class FakeCall:
    """A stage call: its result after ``gate``; ``cancel`` is recorded."""

    def __init__(self, result: Callable[[], Any], gate: Gate) -> None:
        self.cancelled = False
        self._task = asyncio.ensure_future(self._run(result, gate))

    async def _run(self, result: Callable[[], Any], gate: Gate) -> Any:
        await gate.passage()
        return result()

    def __await__(self) -> Generator[Any, None, Any]:
        return self._task.__await__()

    def cancel(self) -> None:
        self.cancelled = True
        self._task.cancel()


class FakeStream:
    """A streaming call yielding ``items``, each after passing ``gate``."""

    def __init__(
        self,
        items: list[Any],
        gate: Gate,
        streams: list["FakeStream"],
        changed: asyncio.Event | None = None,
        given: Callable[[], None] | None = None,
    ) -> None:
        """``given``: called once the consumer has taken each item, in the same turn of the
        event loop (before any task it woke runs)."""
        self.items = items
        self.gate = gate
        self._changed = changed
        self._given = given
        self.cancelled = False
        self.finished = False
        streams.append(self)

    async def _iterate(self) -> AsyncIterator[Any]:
        for item in self.items:
            try:
                await self.gate.passage()
            except asyncio.CancelledError:
                if self.cancelled:  # as Serve's DeploymentResponseGenerator does
                    raise RequestCancelledError("fake") from None
                raise
            if self.cancelled:
                return
            if self._given is not None:
                asyncio.get_running_loop().call_soon(self._given)
            yield item
        self.finished = True

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._iterate()

    def cancel(self) -> None:
        self.cancelled = True
        if self._changed is not None:
            self._changed.set()


@functools.cache
def real_denoiser() -> Denoiser:
    """DTLN, loaded once for every test of the process (its two networks hold no session state)."""
    return Denoiser()


def spoken_ms(pcm: bytes) -> float:
    return len(pcm) * 1000 / (2 * REALTIME_RATE)


class FakeStages:
    """The four stages. The LLM answers with ``answer`` (a list of deltas); the TTS gives
    ``tts_chunks`` chunks of ``tts_chunk_ms`` of audio per piece."""

    def __init__(self) -> None:
        self._listener = Listener(EnergyVoiceDetector(), real_denoiser())
        self.vad_calls = 0
        self.noise_reduced = 0
        """Listening calls that denoised."""
        self.stt_gate = Gate()
        self.turn_end_gate = Gate()
        self.complete_of: Callable[[np.ndarray], float] = lambda utterance: 1.0
        """Smart Turn's verdict on an utterance (default: every one is complete)."""
        self.end_of_turn_calls: list[FakeCall] = []
        self.message_ends_of: Callable[[str], float] = lambda text: 0.1
        """The LLM's probability that a user's message ends (``Stages.message_ends``; default:
        not sure either way, so Smart Turn's verdict decides)."""
        self.message_ends_asked: list[str] = []
        self.transcript = "Question one."
        self.transcript_of: Callable[[np.ndarray], str] | None = None
        """When set, the transcript of the audio given (else ``transcript``)."""
        self.stt_calls: list[FakeCall] = []
        self.over_answer_looks: list[bool] = []
        self.traces: list[Carrier | None] = []
        """Per ``transcribe`` call, whether it was a look at speech over an answer."""
        self.llm_gate = Gate()
        self.session_llm_gates: dict[str, Gate] = {}
        """Gates for one session's LLM requests only, by scope session id."""
        self.answer: list[Any] = ["The answer", " is one.", " That is all."]
        """Text deltas, and function-call pieces (``handlers.tools``)."""
        self.session_answers: dict[str, list[Any]] = {}
        """One session's answer only, by scope session id."""
        self.llm_streams: list[FakeStream] = []
        self.llm_requests: list[LLMRequest] = []
        self.prefills: list[list[dict[str, str]]] = []
        self.fits: list[list[dict[str, str]]] = []
        self.context_chars = 10**9
        self.tts_gate = Gate()
        self.session_tts_gates: dict[str, Gate] = {}
        """Gates for one session's TTS requests only, by scope session id."""
        self.tts_chunks = 1
        self.tts_chunk_ms = 300
        self.tts_streams: list[FakeStream] = []
        self.tts_given: dict[str, Callable[[], None]] = {}
        """Called as one session's TTS chunks are taken, by scope session id (``FakeStream``'s
        ``given``): what the session does in the very turn its audio arrives."""
        self.fail_transcribe: BaseException | None = None
        """Raised by the call itself (a bug in calling the stage)."""
        self.fail_transcribe_async = False
        """The call fails on its replica."""
        self._changed = asyncio.Event()
        """Set at every request and every cancel of a stream (what ``until`` waits on)."""

    async def until(self, condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Wait until ``condition`` holds, looking again after each request or cancel."""
        async with asyncio.timeout(timeout_s):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    async def listen(self, hearing: Hearing, audio: np.ndarray) -> VADResult:
        self.vad_calls += 1
        self.noise_reduced += hearing.noise is not None
        await asyncio.sleep(0)
        return self._listener.listen_batch([(hearing, audio)])[0]

    def end_of_turn(self, utterance: np.ndarray) -> FakeCall:
        call = FakeCall(lambda: self.complete_of(utterance), self.turn_end_gate)
        self.end_of_turn_calls.append(call)
        self._changed.set()
        return call

    def transcribe(self, audio: np.ndarray, over_answer: bool = False, trace: Carrier | None = None) -> FakeCall:
        self.over_answer_looks.append(over_answer)
        self.traces.append(trace)
        if self.fail_transcribe is not None:
            raise self.fail_transcribe
        call = FakeCall(lambda: self._transcribed(audio), self.stt_gate)
        self.stt_calls.append(call)
        self._changed.set()
        return call

    def _transcribed(self, audio: np.ndarray) -> str:
        if self.fail_transcribe_async:
            raise ConnectionError("STT replica died")
        return self.transcript if self.transcript_of is None else self.transcript_of(audio)

    async def prefill(self, messages: list[dict[str, str]]) -> None:
        self.prefills.append(messages)

    async def message_ends(self, text: str) -> float:
        self.message_ends_asked.append(text)
        self._changed.set()
        return self.message_ends_of(text)

    async def fit(self, messages: list[dict[str, str]]) -> int:
        """Drops what a context of ``context_chars`` characters cannot hold, oldest first."""
        self.fits.append(messages)
        dropped = 0
        while sum(len(m["content"]) for m in messages[dropped:]) > self.context_chars:
            dropped += 1
        return dropped

    def generate(self, request: LLMRequest) -> FakeStream:
        self.llm_requests.append(request)
        self._changed.set()
        gate = self.session_llm_gates.get(request.ticket.session_id, self.llm_gate)
        answer = self.session_answers.get(request.ticket.session_id, self.answer)
        return FakeStream(list(answer), gate, self.llm_streams, self._changed)

    def synthesize(self, request: TTSRequest) -> FakeStream:
        chunk = bytes(int(REALTIME_RATE * 2 * self.tts_chunk_ms / 1000))
        gate = self.session_tts_gates.get(request.ticket.session_id, self.tts_gate)
        self._changed.set()
        given = self.tts_given.get(request.ticket.session_id)
        return FakeStream([chunk] * self.tts_chunks, gate, self.tts_streams, self._changed, given)

    def live_streams(self) -> list[FakeStream]:
        return [s for s in self.llm_streams + self.tts_streams if not (s.cancelled or s.finished)]


class FakeScope(CancelScope):
    """The session's scope without Ray: tickets carry no host."""

    def __init__(self, session_id: str) -> None:
        super().__init__()
        self.session_id = session_id

    def ticket(self, generation: int | None = None) -> ScopeTicket:
        current = self.generation
        generation = current if generation is None else generation
        return ScopeTicket(self.session_id, None, 0, generation, current)  # type: ignore[arg-type]


class FakeSocket:
    """The server side of a WebSocket as Starlette gives it, fed and read by the test."""

    def __init__(self) -> None:
        self.incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.sent: list[dict[str, Any]] = []
        self.sent_at: list[float] = []
        """When each of ``sent`` went out (``time.monotonic``)."""
        self.send_gate = Gate()
        self.closed: tuple[int, str] | None = None
        self.client_state = self.application_state = "connected"
        self._arrived = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        return await self.incoming.get()

    async def send_text(self, text: str) -> None:
        await self.send_gate.passage()
        self.sent.append(json.loads(text))
        self.sent_at.append(time.monotonic())
        self._arrived.set()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.closed = (code, reason)
        self.incoming.put_nowait({"type": "websocket.disconnect", "code": code})
        self._arrived.set()

    async def until(self, condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Until ``condition()`` holds, looked at again as each message is sent and at the close."""
        async with asyncio.timeout(timeout_s):
            while not condition():
                self._arrived.clear()
                await self._arrived.wait()

    def client_sends(self, **event: Any) -> None:
        self.incoming.put_nowait({"type": "websocket.receive", "text": json.dumps(event)})

    def client_leaves(self) -> None:
        self.incoming.put_nowait({"type": "websocket.disconnect", "code": 1000})

    def types(self) -> list[str]:
        return [e["type"] for e in self.sent]

    def of_type(self, kind: str, response_id: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.sent if e["type"] == kind and response_id in (None, e.get("response_id"))]

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 5.0) -> dict[str, Any]:
        """The first event sent that matches, waiting for it if need be."""
        async with asyncio.timeout(timeout_s):
            while True:
                for event in self.sent:
                    if predicate(event):
                        return event
                self._arrived.clear()
                await self._arrived.wait()

    async def wait_type(self, kind: str, count: int = 1, timeout_s: float = 5.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout_s):
            while len(self.of_type(kind)) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.of_type(kind)[count - 1]


def speech(question: int = 1, seconds: float = 1.0, silence_s: float = 1.0) -> bytes:
    """A tone-coded question as the client sends it (24 kHz PCM16), with trailing silence."""
    tone = np.concatenate([question_tone(question, seconds), np.zeros(int(silence_s * SPEECH_RATE), np.float32)])
    return float_to_pcm16(resample(tone, SPEECH_RATE, REALTIME_RATE))


def append_audio(socket: FakeSocket, pcm: bytes, frame_ms: int = 100) -> None:
    frame = REALTIME_RATE * 2 * frame_ms // 1000
    for offset in range(0, len(pcm), frame):
        chunk = base64.b64encode(pcm[offset : offset + frame]).decode()
        socket.client_sends(type="input_audio_buffer.append", audio=chunk)


def in_format(pcm16: bytes, wire: WireAudio) -> bytes:
    """24 kHz PCM16 as a client of ``wire`` sends it."""
    return wire.wire_bytes(resample(pcm16_to_float(pcm16), REALTIME_RATE, wire.rate))


def send_audio(socket: FakeSocket, audio: bytes, wire: WireAudio, frame_ms: int = 20) -> None:
    frame = wire.bytes_per_second * frame_ms // 1000
    for offset in range(0, len(audio), frame):
        chunk = base64.b64encode(audio[offset : offset + frame]).decode()
        socket.client_sends(type="input_audio_buffer.append", audio=chunk)


class Harness:
    """One session on fake stages, running as a task."""

    def __init__(
        self,
        stages: FakeStages | None = None,
        name: str = "session",
        prompt_budget_tokens: int | None = None,
        metrics: SessionMetrics | None = None,
        stored: StoredSession | None = None,
        transport: Callable[[FakeSocket], Any] | None = None,
        recording: RecordingRequest | None = None,
        drain_notice: bool = False,
        **config: Any,
    ) -> None:
        """``transport``: the session's transport over the socket (a WebSocket's if ``None``)."""
        self.stages = stages or FakeStages()
        self.socket = FakeSocket()
        self._speaks_realtime = transport is None
        self.scope = FakeScope(name)
        # Fake answers are seconds of audio: sent as made (not paced in real time) unless a
        # test says otherwise; pacing has tests of its own (test_pacing.py).
        config.setdefault("interruption", InterruptionRules(audio_lead_ms=None))
        # The prompts these tests read are the conversation's own; the default instructions
        # have tests of their own (test_voice_defaults.py).
        config.setdefault("instructions", None)
        self.config = IngressConfig(**config)
        self.session = RealtimeSession(
            WebSocketTransport(self.socket) if transport is None else transport(self.socket),  # type: ignore[arg-type]
            self.stages,
            self.config,
            self.scope,
            metrics or SessionMetrics(IngressMetrics()),
            SessionStart(
                model_name="fake",
                prompt_budget_tokens=prompt_budget_tokens,
                stored=stored,
                drain_notice=drain_notice,
                recording=recording,
            ),
        )
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "Harness":
        self.task = asyncio.ensure_future(self.session.run())
        if self._speaks_realtime:  # another transport's client may be told nothing
            await self.socket.wait_type("session.created")
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        if not self.task.done():
            self.socket.client_leaves()
        async with asyncio.timeout(5):
            await self.task


class InProcessActor:
    """An object behind Ray's actor-handle calling convention (``handle.method.remote(...)``
    returns an awaitable), in this process: the store's client runs against its real rules
    without a Ray cluster. ``calls`` names the calls served so far; ``gate`` holds them."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.gate = Gate()
        self.calls: list[str] = []
        self._served = asyncio.Event()

    async def until(self, holds: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Until ``holds()`` is true, checked after each call served."""
        async with asyncio.timeout(timeout_s):
            while not holds():
                self._served.clear()
                await self._served.wait()

    def restart(self, target: Any) -> None:
        """The actor died and Ray started it again: ``target`` holds its (fresh) state."""
        self._target = target

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)
        actor = self

        class _Method:
            def remote(self, *args: Any) -> Any:
                async def call() -> Any:
                    await actor.gate.passage()
                    result = method(*args)
                    actor.calls.append(name)
                    actor._served.set()
                    return result

                return call()

        return _Method()

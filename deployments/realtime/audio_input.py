"""The session's input audio: resampling, the listening calls and the utterance buffer.

Appended audio is resampled to 16 kHz and queued; the queue is bounded in seconds of audio
and an append that would overflow it is refused (``input_audio_backlog_full``), never
waited for: the receive loop stays free for control events and for noticing the client left.
The listening loop sends it in batches, one call in flight per session, to be denoised (when
the session asked for ``noise_reduction``) and heard by the VAD, and puts what was heard
into the utterance buffer: STT hears the audio the VAD decided on. Each boundary the VAD
reports comes out of :meth:`AudioInput.next_event` with the audio it closes. The loop never
waits for anything else, so turn-taking (which awaits STT) can never stop listening.
"""

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import numpy as np

from deployments.realtime.protocol import ProtocolError
from deployments.realtime.session_config import SessionConfig
from deployments.realtime.settings import SessionSettings
from deployments.voice_activity import VADResult
from handlers.audio import REALTIME_RATE, SPEECH_RATE, StreamResampler
from handlers.denoise import DenoiserState, NoiseReductionType
from handlers.listening import Hearing
from handlers.utterance import UtteranceBuffer
from handlers.vad import (
    SpeechPaused,
    SpeechStarted,
    SpeechStopped,
    TurnDetection,
    VADEvent,
    VADState,
)

logger = logging.getLogger(__name__)

VAD_BATCH_SAMPLES = SPEECH_RATE // 2
"""At most 0.5 s per VAD call, well inside the utterance buffer's look-back."""
VAD_MIN_BATCH = 3 * 512
"""Three silero windows (96 ms) per VAD call while audio keeps coming."""
VAD_BATCH_WAIT_S = 0.1

Listen = Callable[[Hearing, np.ndarray], Awaitable[VADResult]]


@dataclass(frozen=True)
class SpeechHeard:
    """The VAD has listened up to ``sample``, as :meth:`AudioInput.notify_at` asked: how
    turn-taking learns that speech has lasted long enough, with no timer of its own."""

    sample: int


@dataclass(frozen=True)
class TurnEvent:
    """A VAD boundary, with the audio it closes (the utterance so far for a pause, the
    whole utterance for a stop) and, for those, how long after the audio at the boundary
    arrived the VAD reported it (batching plus the call); or a :class:`SpeechHeard`."""

    vad: VADEvent | SpeechHeard
    audio: np.ndarray | None
    lag_s: float | None = None


class AudioInput:
    def __init__(
        self, listen: Listen, settings: SessionSettings, config: SessionConfig, on_vad_failure: Callable[[], None]
    ) -> None:
        """Starts with ``settings``' turn detection and noise reduction (``reconfigure`` and
        ``reduce_noise`` change them); ``config``: how much audio is kept and may wait."""
        self._listen = listen
        self._defaults = settings.defaults
        self._max_input_audio_s = config.max_input_audio_s
        self._max_queued_samples = int(config.limits.max_queued_audio_s * SPEECH_RATE)
        self._on_vad_failure = on_vad_failure
        self._resampler = StreamResampler(REALTIME_RATE, SPEECH_RATE)
        self._input_rate = REALTIME_RATE
        self._queue: asyncio.Queue[tuple[np.ndarray, float]] = asyncio.Queue()
        self._queued_samples = 0
        self._events: asyncio.Queue[tuple[int, TurnEvent]] = asyncio.Queue()
        self._taken = 0
        """Samples taken from the queue since the input last restarted (in the buffer or being heard)."""
        self._arrivals: deque[tuple[int, float]] = deque(maxlen=256)
        """(end sample, arrival time) of recent chunks: how late the VAD answers."""
        self._epoch = 0
        """Bumped whenever the input restarts; what the VAD said of older audio is void."""
        self._notify_at: list[int] = []
        self.turn_detection = settings.turn_detection
        self._noise: DenoiserState | None = None
        self.reduce_noise(settings.noise_reduction)
        self._vad_state: VADState
        self._buffer: UtteranceBuffer
        self._restart()

    @property
    def received_ms(self) -> int:
        """Input audio taken in since the input last restarted (the clock of ``audio_*_ms``)."""
        return self._buffer.end_sample * 1000 // SPEECH_RATE

    @property
    def arrived_sample(self) -> int:
        """Input audio that has arrived since the input last restarted, whether the VAD has
        listened to it yet or not (samples at 16 kHz: the VAD's clock)."""
        return self._taken + self._queued_samples

    def speech_so_far(self, heard: int | None = None) -> np.ndarray:
        """The current utterance as far as it has been taken in, or up to the VAD's position
        ``heard`` (a copy)."""
        return self._buffer.peek(heard)

    def append(self, samples: np.ndarray, rate: int) -> None:
        """Audio from the client (float32 at ``rate``: its format's); refused while the VAD is
        too far behind."""
        if not samples.size:
            return
        if self._queued_samples + samples.size * SPEECH_RATE // rate > self._max_queued_samples:
            raise ProtocolError(
                "input_audio_backlog_full",
                f"over {self._max_queued_samples / SPEECH_RATE:g} s of audio wait for voice activity detection; "
                "this audio was dropped",
                "max_queued_audio_s",
            )
        if rate != self._input_rate:  # the client's format changed: a stream at its rate
            # Telephone audio has nothing above 4 kHz to filter out; HQ's filter would hold
            # 95 ms of it back from the VAD, LQ's holds 4 ms.
            quality = "LQ" if rate < SPEECH_RATE else "HQ"
            self._resampler, self._input_rate = StreamResampler(rate, SPEECH_RATE, quality), rate
        chunk = self._resampler.process(samples)
        self._queued_samples += len(chunk)
        self._queue.put_nowait((chunk, time.monotonic()))

    async def commit(self) -> np.ndarray:
        """The utterance so far (every append before this call included); the buffer restarts."""
        await self._queue.join()
        utterance = self._buffer.take()
        if self.turn_detection is None:
            self._buffer.keep_all()
        return utterance

    async def clear(self) -> None:
        await self._queue.join()
        self._restart()

    def reconfigure(self, turn_detection: TurnDetection | None) -> None:
        """New settings: forget the audio and the detector's state."""
        self.turn_detection = turn_detection
        self._restart()

    def reduce_noise(self, kind: NoiseReductionType | None) -> None:
        """Denoise the audio from the next call on (a new stream of the denoiser: the
        input goes on, unlike a change of turn detection)."""
        if kind != (self._noise.kind if self._noise is not None else None):
            self._noise = DenoiserState(kind) if kind is not None else None

    def notify_at(self, sample: int) -> None:
        """Send a :class:`SpeechHeard` once the VAD has listened up to ``sample`` (a
        restart of the input forgets the request)."""
        self._notify_at.append(sample)

    async def next_event(self) -> TurnEvent:
        """The next boundary of the current input (boundaries of audio since forgotten are skipped)."""
        while True:
            epoch, event = await self._events.get()
            if epoch == self._epoch:
                return event

    async def run(self) -> None:
        """The listening loop."""
        while True:
            audio, pieces, epoch = await self._next_batch()
            try:
                await self._hear(audio, epoch)
            finally:  # the audio is in the buffer (or void): a commit may take it now
                for _ in range(pieces):
                    self._queue.task_done()

    async def _hear(self, audio: np.ndarray, epoch: int) -> None:
        asked = Hearing(self._vad_state if self.turn_detection is not None else None, self._noise)
        if asked.vad is None and asked.noise is None:
            self._buffer.append(audio)
            return
        try:
            hearing, heard, events = await self._listen(asked, audio)
        except Exception:  # a replica lost mid-call: report it, keep the audio as sent, listen on
            logger.exception("VAD call failed")
            self._on_vad_failure()
            if epoch == self._epoch:
                self._buffer.append(audio)
            return
        if epoch != self._epoch:
            return  # cleared or reconfigured meanwhile: this answer is void
        if self._noise is asked.noise:  # else noise reduction changed meanwhile: the new stream stands
            self._noise = hearing.noise
        self._buffer.append(audio if heard is None else heard)
        if hearing.vad is None:
            return
        self._vad_state = state = hearing.vad
        for event in events:
            self._events.put_nowait((epoch, self._attach(event)))
        if self._notify_at and min(self._notify_at) <= state.samples_seen:
            self._notify_at = [sample for sample in self._notify_at if sample > state.samples_seen]
            self._events.put_nowait((epoch, TurnEvent(SpeechHeard(state.samples_seen), None)))

    def _restart(self) -> None:
        settings = self.turn_detection or self._defaults
        self._vad_state = VADState(settings)
        self._buffer = UtteranceBuffer(settings.prefix_padding_ms, self._max_input_audio_s)
        if self.turn_detection is None:
            self._buffer.keep_all()
        self._taken = 0
        self._arrivals.clear()
        self._notify_at.clear()
        self._epoch += 1

    def _attach(self, event: VADEvent) -> TurnEvent:
        """Act on the buffer as the boundary says, in step with the audio."""
        if isinstance(event, SpeechStarted):
            self._buffer.mark_start(event.start_sample)
        elif isinstance(event, SpeechPaused):
            return TurnEvent(event, self._buffer.peek(event.sample), self._lag_s(event.sample))
        elif isinstance(event, SpeechStopped):
            lag_s = self._lag_s(event.end_sample)
            return TurnEvent(event, self._buffer.take(event.end_sample), lag_s)
        return TurnEvent(event, None)

    async def _next_batch(self) -> tuple[np.ndarray, int, int]:
        """Audio for one listening call, how many queued chunks it holds, and the input
        epoch it belongs to.

        Clients send 20-100 ms frames; one Serve call per frame would cost more CPU than the
        model. So a call waits for ``VAD_MIN_BATCH`` samples (or ``VAD_BATCH_WAIT_S`` without
        more audio) and takes at most ``VAD_BATCH_SAMPLES``. With nothing to listen for (no
        VAD, no noise reduction) it takes what is queued at once: a commit waits for no batch.
        """
        pieces = [self._take(*await self._queue.get())]
        epoch = self._epoch
        listening = self.turn_detection is not None or self._noise is not None
        deadline = asyncio.get_running_loop().time() + VAD_BATCH_WAIT_S
        while (total := sum(map(len, pieces))) < VAD_BATCH_SAMPLES:
            if self._queue.empty():
                if total >= VAD_MIN_BATCH or not listening:
                    break
                try:
                    async with asyncio.timeout_at(deadline):
                        pieces.append(self._take(*await self._queue.get()))
                except TimeoutError:
                    break
            else:
                pieces.append(self._take(*self._queue.get_nowait()))
        return np.concatenate(pieces), len(pieces), epoch

    def _take(self, chunk: np.ndarray, arrived_at: float) -> np.ndarray:
        self._queued_samples -= len(chunk)
        self._taken += len(chunk)
        self._arrivals.append((self._taken, arrived_at))
        return chunk

    def _lag_s(self, sample: int) -> float | None:
        arrived_at = next((at for end, at in self._arrivals if end >= sample), None)
        return None if arrived_at is None else time.monotonic() - arrived_at

"""Where an answer's text goes: spoken (TTS, audio deltas) or written (text deltas).

One choice when a response starts (``answer_sink``), then one small interface: ``cut``
says how the LLM's text is split into pieces (speakable sentences, or deltas as they
come), ``ready`` when the sink takes its next pieces, and ``add`` sends them. Both sinks
count what the client was *sent* through the outbox's ``on_sent``, so a cancel keeps
exactly that (``AssistantMessage.keep_sent``).

A spoken answer is synthesised just in time: after its first piece, the next pieces are
taken only once the client's playback is within ``speech_lead_ms`` of the audio sent so
far (``_Playback``), and whatever pieces are ready then go to the TTS in one call
(``deployments.realtime.read_ahead``).
"""

import asyncio
import base64
import time
from collections.abc import Iterable, Sequence
from typing import Protocol

from cancel import ScopeTicket
from deployments.messages import TTSRequest
from deployments.realtime.failover import FailoverStream
from deployments.realtime.items import AssistantMessage
from deployments.realtime.outbox import Outbox
from deployments.realtime.response_events import ResponseEvents
from deployments.realtime.response_run import ResponseRun
from deployments.realtime.stages import Stages
from handlers.audio import REALTIME_RATE
from handlers.text import SpeechChunker


class AnswerSink(Protocol):
    def cut(self, delta: str) -> Iterable[str]:
        """The pieces an LLM text delta completes."""
        ...

    def flush(self) -> Iterable[str]:
        """The pieces left when the LLM is done."""
        ...

    async def ready(self) -> None:
        """Wait until the sink should take its next pieces."""
        ...

    async def add(self, pieces: Sequence[str]) -> None:
        """Send these pieces, in order (waits for room in the outbox: a slow client slows
        only this)."""
        ...


class WrittenAnswer:
    """A text answer: the LLM's deltas as they come, no TTS."""

    def __init__(self, run: ResponseRun, events: ResponseEvents, outbox: Outbox) -> None:
        self._run, self._events, self._outbox = run, events, outbox

    def cut(self, delta: str) -> Iterable[str]:
        return (delta,)

    def flush(self) -> Iterable[str]:
        return ()

    async def ready(self) -> None:
        return None

    async def add(self, pieces: Sequence[str]) -> None:
        await self._outbox.room(self._run.id)
        piece, answer = "".join(pieces), self._run.answer
        answer.text += piece

        def sent() -> None:
            answer.sent_chars += len(piece)

        self._events.text_delta(piece, sent)


class SpokenAnswer:
    """A spoken answer: each piece's transcript, then its TTS audio in frames of
    ``audio_delta_ms``; the pieces of one ``add`` in one TTS call. A TTS replica lost
    mid-call costs no words: another speaks them (``deployments.realtime.failover``)."""

    def __init__(
        self,
        run: ResponseRun,
        events: ResponseEvents,
        outbox: Outbox,
        stages: Stages,
        ticket: ScopeTicket,
        *,
        first_chunk_words: int,
        audio_delta_ms: int,
        speech_lead_ms: int,
    ) -> None:
        self._run, self._events, self._outbox = run, events, outbox
        self._stages, self._ticket = stages, ticket
        self._chunker = SpeechChunker(first_chunk_max_words=first_chunk_words)
        self._frame_bytes = REALTIME_RATE * audio_delta_ms // 1000 * 2
        self._lead_s = speech_lead_ms / 1000
        self._playback = _Playback()

    def cut(self, delta: str) -> Iterable[str]:
        return self._chunker.feed(delta)

    def flush(self) -> Iterable[str]:
        return self._chunker.flush()

    async def ready(self) -> None:
        await self._playback.within(self._lead_s)

    async def add(self, pieces: Sequence[str]) -> None:
        run, answer = self._run, self._run.answer
        texts = [piece if not answer.text and not index else " " + piece for index, piece in enumerate(pieces)]
        tts = FailoverStream(lambda: self._stages.synthesize(TTSRequest(tuple(pieces), self._ticket)), run.id)
        run.streams.add(tts)
        told = 0  # pieces whose transcript the client has been sent
        speaking = -1  # the piece of the last chunk
        async for index, pcm in tts:
            run.timeline.mark("tts_first_audio")
            for text in texts[told : index + 1]:
                self._events.transcript_delta(text)
            told = max(told, index + 1)
            answer.speak(texts[index], audio_ms(len(pcm)), continues_piece=index == speaking)
            speaking = index
            for offset in range(0, len(pcm), self._frame_bytes):
                await self._outbox.room(run.id)
                frame = pcm[offset : offset + self._frame_bytes]
                sent = _AudioSent(answer, self._playback, len(frame))
                self._events.audio_delta(base64.b64encode(frame).decode("ascii"), sent)
                run.timeline.mark("first_audio")
        for text in texts[told:]:  # pieces with nothing to say aloud
            self._events.transcript_delta(text)
        run.streams.discard(tts)


class _Playback:
    """When the client will have played the audio sent so far: it plays from the first
    frame on, and each frame as soon as it has played the one before."""

    __slots__ = ("ends_at",)

    def __init__(self) -> None:
        self.ends_at = 0.0

    def sent(self, ms: float) -> None:
        self.ends_at = max(self.ends_at, time.monotonic()) + ms / 1000

    async def within(self, lead_s: float) -> None:
        """Until the audio still to play is ``lead_s`` or less."""
        if (wait := self.ends_at - lead_s - time.monotonic()) > 0:
            await asyncio.sleep(wait)


class _AudioSent:
    """Counts one frame as sent (a callable object: cheaper than a closure per frame)."""

    __slots__ = ("_answer", "_playback", "_ms")

    def __init__(self, answer: AssistantMessage, playback: _Playback, frame_bytes: int) -> None:
        self._answer, self._playback, self._ms = answer, playback, audio_ms(frame_bytes)

    def __call__(self) -> None:
        self._answer.audio_ms += self._ms
        self._playback.sent(self._ms)


def answer_sink(
    run: ResponseRun,
    events: ResponseEvents,
    outbox: Outbox,
    stages: Stages,
    ticket: ScopeTicket,
    *,
    first_chunk_words: int,
    audio_delta_ms: int,
    speech_lead_ms: int,
) -> AnswerSink:
    """The sink for ``run``'s answer: the one place spoken and written answers part."""
    if run.answer.spoken_aloud:
        return SpokenAnswer(
            run,
            events,
            outbox,
            stages,
            ticket,
            first_chunk_words=first_chunk_words,
            audio_delta_ms=audio_delta_ms,
            speech_lead_ms=speech_lead_ms,
        )
    return WrittenAnswer(run, events, outbox)


def audio_ms(pcm_bytes: int) -> float:
    return pcm_bytes * 1000 / (2 * REALTIME_RATE)

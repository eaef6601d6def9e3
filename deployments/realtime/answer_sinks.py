"""Where an answer's text goes: spoken (TTS, audio deltas) or written (text deltas).

One choice when a response starts (``answer_sink``), then one small interface: ``cut``
says how the LLM's text is split into pieces (speakable sentences, or deltas as they
come), and ``add`` sends one piece. Both count what the client was *sent* through the
outbox's ``on_sent``, so a cancel keeps exactly that (``AssistantMessage.keep_sent``).
"""

import base64
from collections.abc import Iterable
from typing import Protocol

from cancel import ScopeTicket
from deployments.messages import TTSRequest
from deployments.realtime.failover import FailoverStream
from deployments.realtime.items import AssistantMessage
from deployments.realtime.outbox import Outbox
from deployments.realtime.playback import Playback
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

    async def add(self, piece: str) -> None:
        """Send one piece (waits for room in the outbox: a slow client slows only this)."""
        ...


class WrittenAnswer:
    """A text answer: the LLM's deltas as they come, no TTS."""

    def __init__(self, run: ResponseRun, events: ResponseEvents, outbox: Outbox) -> None:
        self._run, self._events, self._outbox = run, events, outbox

    def cut(self, delta: str) -> Iterable[str]:
        return (delta,)

    def flush(self) -> Iterable[str]:
        return ()

    async def add(self, piece: str) -> None:
        await self._outbox.room(self._run.id)
        answer = self._run.answer
        answer.text += piece

        def sent() -> None:
            answer.sent_chars += len(piece)

        self._events.text_delta(piece, sent)


class SpokenAnswer:
    """A spoken answer: each speakable piece's transcript, then its TTS audio in frames of
    ``audio_delta_ms``. A TTS replica lost mid-piece costs no words: another speaks it
    (``deployments.realtime.failover``)."""

    def __init__(
        self,
        run: ResponseRun,
        events: ResponseEvents,
        outbox: Outbox,
        stages: Stages,
        ticket: ScopeTicket,
        playback: Playback,
        *,
        first_chunk_words: int,
        audio_delta_ms: int,
    ) -> None:
        self._run, self._events, self._outbox = run, events, outbox
        self._stages, self._ticket, self._playback = stages, ticket, playback
        self._chunker = SpeechChunker(first_chunk_max_words=first_chunk_words)
        self._frame_bytes = REALTIME_RATE * audio_delta_ms // 1000 * 2
        self.unsent_ms = 0.0
        """Audio of this answer given to the outbox (queued or held) and not yet sent."""
        self._unsent = lambda: self.unsent_ms

    def cut(self, delta: str) -> Iterable[str]:
        return self._chunker.feed(delta)

    def flush(self) -> Iterable[str]:
        return self._chunker.flush()

    async def add(self, piece: str) -> None:
        run, answer = self._run, self._run.answer
        text = piece if not answer.text else " " + piece
        self._events.transcript_delta(text)
        request = TTSRequest(piece, self._ticket)
        tts = FailoverStream(lambda: self._stages.synthesize(request), run.id)
        run.streams.add(tts)
        continues_piece = False
        async for pcm in tts:
            run.timeline.mark("tts_first_audio")
            answer.speak(text, audio_ms(len(pcm)), continues_piece)
            continues_piece = True
            for offset in range(0, len(pcm), self._frame_bytes):
                await self._outbox.room(run.id)
                frame = pcm[offset : offset + self._frame_bytes]
                sent = _AudioSent(self, answer, len(frame), self._playback)
                self.unsent_ms += sent.ms
                await self._playback.room(self._unsent)
                self._events.audio_delta(base64.b64encode(frame).decode("ascii"), sent)
                run.timeline.mark("first_audio")
        run.streams.discard(tts)


class _AudioSent:
    """Counts one frame as sent, and heard from now (a callable object: cheaper than a
    closure per frame)."""

    __slots__ = ("_sink", "_answer", "ms", "_playback")

    def __init__(self, sink: SpokenAnswer, answer: AssistantMessage, frame_bytes: int, playback: Playback) -> None:
        self._sink, self._answer, self.ms, self._playback = sink, answer, audio_ms(frame_bytes), playback

    def __call__(self) -> None:
        self._sink.unsent_ms -= self.ms
        self._answer.audio_ms += self.ms
        self._playback.sent(self.ms)


def answer_sink(
    run: ResponseRun,
    events: ResponseEvents,
    outbox: Outbox,
    stages: Stages,
    ticket: ScopeTicket,
    playback: Playback,
    *,
    first_chunk_words: int,
    audio_delta_ms: int,
) -> AnswerSink:
    """The sink for ``run``'s answer: the one place spoken and written answers part."""
    if run.answer.spoken_aloud:
        return SpokenAnswer(
            run,
            events,
            outbox,
            stages,
            ticket,
            playback,
            first_chunk_words=first_chunk_words,
            audio_delta_ms=audio_delta_ms,
        )
    return WrittenAnswer(run, events, outbox)


def audio_ms(pcm_bytes: int) -> float:
    return pcm_bytes * 1000 / (2 * REALTIME_RATE)

"""Where an answer's text goes: spoken (TTS, audio deltas) or written (text deltas).

One choice when a response starts (``answer_sink``), then one small interface: ``cut``
says how the LLM's text is split into pieces (speakable sentences, or deltas as they
come), ``add`` sends one piece, ``played`` waits until all of them have gone to the outbox
(a spoken answer's go out paced, from its playout task) and ``stop`` ends the answer's
sending. Both count what the client was *sent* through the outbox's ``on_sent``, so a
cancel keeps exactly that (``AssistantMessage.keep_sent``).
"""

import time
from collections.abc import Iterable, Iterator
from typing import Protocol

from cancel import ScopeTicket
from deployments.messages import TTSRequest
from deployments.realtime.kit import SessionKit
from deployments.realtime.outbox import Outbox
from deployments.realtime.response.config import ResponseSettings
from deployments.realtime.response.events import ResponseEvents
from deployments.realtime.response.failover import FailoverStream
from deployments.realtime.response.playout import Playout
from deployments.realtime.response.run import ResponseRun
from deployments.realtime.transports.wire_audio import audio_ms
from deployments.realtime.turn_trace import StageSpan
from handlers.audio import REALTIME_RATE
from handlers.speakable import speakable
from handlers.text import SpeechChunker


class AnswerSink(Protocol):
    def cut(self, delta: str) -> Iterable[str]:
        """The pieces an LLM text delta completes."""
        ...

    def flush(self, cut_short: bool) -> Iterable[str]:
        """The pieces left when the LLM is done (``cut_short``: it stopped at its token cap)."""
        ...

    async def add(self, piece: str) -> None:
        """Send one piece (waits for room in the outbox: a slow client slows only this)."""
        ...

    async def played(self) -> None:
        """Wait until every piece added so far has gone to the outbox."""
        ...

    def stop(self) -> None:
        """The answer is over: nothing more of it is sent."""
        ...


class WrittenAnswer:
    """A text answer: the LLM's deltas as they come, no TTS."""

    def __init__(self, run: ResponseRun, events: ResponseEvents, outbox: Outbox) -> None:
        self._run, self._events, self._outbox = run, events, outbox

    def cut(self, delta: str) -> Iterable[str]:
        return (delta,)

    def flush(self, cut_short: bool) -> Iterable[str]:
        return ()

    async def add(self, piece: str) -> None:
        await self._outbox.room(self._run.id)
        answer = self._run.answer
        answer.text += piece

        def sent() -> None:
            answer.sent_chars += len(piece)

        self._events.text_delta(piece, sent)

    async def played(self) -> None:
        return  # each piece went to the outbox as it was added

    def stop(self) -> None:
        return


class SpokenAnswer:
    """A spoken answer: each speakable piece's transcript, then its TTS audio in frames of
    ``audio_delta_ms``, sent by the answer's :class:`Playout` (paced to the listener while
    the next piece is synthesised). A TTS replica lost mid-piece costs no words: another
    speaks it (``deployments.realtime.response.failover``)."""

    def __init__(
        self, run: ResponseRun, events: ResponseEvents, kit: SessionKit, ticket: ScopeTicket, settings: ResponseSettings
    ) -> None:
        self._run, self._stages, self._ticket = run, kit.stages, ticket
        self._playout = Playout(run, events, kit.outbox, kit.playback, kit.spawn)
        self._chunker = SpeechChunker(
            first_chunk_max_words=settings.first_chunk_words, low_lead_ms=settings.low_lead_ms
        )
        self._frame_bytes = REALTIME_RATE * settings.audio_delta_ms // 1000 * 2
        self._speech: StageSpan | None = None
        """The ``tts_node`` span of the speech being synthesised (``None``: none yet)."""
        self._spoken_chars, self._synthesized_ns = 0, 0

    def cut(self, delta: str) -> Iterable[str]:
        return _spoken(self._chunker.feed(delta, self._playout.ready_ms()))

    def flush(self, cut_short: bool) -> Iterable[str]:
        return _spoken(self._chunker.flush(cut_short))

    async def add(self, piece: str) -> None:
        run, answer = self._run, self._run.answer
        await self._playout.room()
        text = piece if not answer.text else " " + piece
        self._playout.say(text)
        if self._speech is None:  # one span over a stretch of speech's synthesis calls
            self._speech = run.timeline.stage("tts_node")
        request = TTSRequest(piece, self._ticket, self._speech.carrier)
        tts = FailoverStream(lambda: self._stages.synthesize(request), run.id)
        run.streams.add(tts)
        continues_piece = False
        async for pcm in tts:
            run.timeline.mark("tts_first_audio")
            answer.speak(text, audio_ms(len(pcm)), continues_piece)
            continues_piece = True
            for offset in range(0, len(pcm), self._frame_bytes):
                self._playout.play(pcm[offset : offset + self._frame_bytes])
        self._playout.play(b"")  # the piece ends: an encoder lets out what it held back
        run.streams.discard(tts)
        self._spoken_chars += len(piece)
        self._synthesized_ns = time.time_ns()

    async def played(self) -> None:
        await self._playout.played()
        if self._speech is not None:  # the stretch of speech is over: its synthesis ended with its last piece
            self._speech.end(self._synthesized_ns, **{"s2s.tts.characters": self._spoken_chars})
            self._speech, self._spoken_chars = None, 0

    def stop(self) -> None:
        self._playout.stop()


def _spoken(pieces: Iterable[str]) -> Iterator[str]:
    """The pieces as they are said (markdown, emoji and links undone, numbers and units in
    words: ``handlers.speakable``), and as their transcript says; nothing of those that say nothing."""
    return (spoken for piece in pieces if (spoken := speakable(piece)))


def answer_sink(
    run: ResponseRun, events: ResponseEvents, kit: SessionKit, ticket: ScopeTicket, settings: ResponseSettings
) -> AnswerSink:
    """The sink for ``run``'s answer: the one place spoken and written answers part."""
    if run.answer.spoken_aloud:
        return SpokenAnswer(run, events, kit, ticket, settings)
    return WrittenAnswer(run, events, kit.outbox)

"""Interruptions that are real: speech while an answer is heard interrupts it once confirmed.

A barge-in used to be any sound: an "mm-hmm", a cough or a knock during an answer
cancelled it and started a new reply (the complaint users of every peer make most). Now
speech that starts while the listener hears an answer (:class:`Playback`) is a
*candidate*. Nothing is said of it and the answer goes on; where the server plays the
audio (WebRTC) it pauses. The candidate is confirmed once it has lasted
``min_duration_ms`` and, with ``ignore_backchannels``, once its transcript holds a word
that is not a backchannel, a function word or a sound: then it is a turn like any other, from its real onset
(``speech_started``, the barge-in, an answer). A candidate that ends unconfirmed was never
a turn: no event, no item, no response, and the answer plays on. Speech while nothing is
heard starts a turn at once, as before.

The rules are the server's (``ingress.interruption``) unless a session sets its own
(``turn_detection.interruption``, our extension of the protocol).
"""

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from deployments.realtime.audio_input import AudioInput, SpeechHeard, TurnEvent
from deployments.realtime.failures import StageFailure
from deployments.realtime.kit import SessionKit
from deployments.realtime.spoken_words import holds_a_real_word
from handlers.vad import SpeechStarted, SpeechStopped, ms_to_samples, samples_to_ms

logger = logging.getLogger(__name__)


RECHECK_MS = 300
"""While a candidate's words are only backchannels, look again after this much speech."""


@dataclass
class _Candidate:
    started: SpeechStarted
    look_at: int
    """The sample at which its words are looked at (again)."""
    events: list[TurnEvent] = field(default_factory=list)
    """Every event since the onset, kept for turn-taking if the speech is confirmed."""
    check: asyncio.Task[None] | None = None

    def stopped(self) -> SpeechStopped | None:
        return next((e.vad for e in self.events if isinstance(e.vad, SpeechStopped)), None)


class InterruptionGate:
    def __init__(self, kit: SessionKit, audio: AudioInput, act: Callable[[TurnEvent], None]) -> None:
        """``act``: turn-taking's handling of an event (the gate passes confirmed speech on to
        it, and everything once nothing is pending). The session's ``interrupt_response``
        says whether speech may interrupt an answer at all (if not, nothing is decided and
        the answer never pauses); each candidate's outcome, and how much of its speech had
        come in by then, goes to the metrics."""
        self._kit, self._audio, self._act = kit, audio, act
        self._candidate: _Candidate | None = None

    def take(self, event: TurnEvent) -> None:
        """Route ``event``: to the candidate pending, into a new one, or on to turn-taking."""
        candidate = self._candidate
        if candidate is not None:
            candidate.events.append(event)
            self._follow(candidate, event)
        elif (
            isinstance(event.vad, SpeechStarted)
            and self._kit.settings.interrupt_response
            and not self._kit.settings.interruption.immediate
            and self._kit.playback.playing()
        ):
            look_at = event.vad.start_sample + ms_to_samples(self._kit.settings.interruption.min_duration_ms)
            self._candidate = _Candidate(event.vad, look_at, [event])
            self._kit.playback.pause()
            self._audio.notify_at(look_at)
        else:
            self._act(event)

    def reset(self) -> None:
        """The input restarted: what was pending is forgotten, and the answer plays on."""
        candidate, self._candidate = self._candidate, None
        if candidate is not None:
            if candidate.check is not None:
                candidate.check.cancel()
            self._kit.playback.resume()

    def _follow(self, candidate: _Candidate, event: TurnEvent) -> None:
        rules, vad = self._kit.settings.interruption, event.vad
        if candidate.check is not None and not candidate.check.done():
            return  # the transcript decides; the events wait for it
        if isinstance(vad, SpeechHeard):
            if vad.sample < candidate.look_at:
                return  # another part's notification
            if not rules.ignore_backchannels:
                self._confirm(candidate)
            else:
                # What the VAD has heard, not all that came in: a client that sends in bursts
                # must not lend the candidate the words of speech after it.
                self._check_words(candidate, self._audio.speech_so_far(vad.sample), heard=vad.sample)
        elif isinstance(vad, SpeechStopped) and candidate.stopped() is vad:
            long_enough = not vad.too_short and vad.end_sample - vad.start_sample >= ms_to_samples(
                rules.min_duration_ms
            )
            if not long_enough:
                self._dismiss(candidate, vad)
            elif not rules.ignore_backchannels:
                self._confirm(candidate)
            else:
                assert event.audio is not None
                self._check_words(candidate, event.audio, heard=None)

    def _check_words(self, candidate: _Candidate, audio: np.ndarray, heard: int | None) -> None:
        """Transcribe the candidate so far (``heard``: the VAD's position; ``None``: the
        speech has ended, so this is the last look)."""
        candidate.check = self._kit.spawn(self._words_decide(candidate, audio, heard))

    async def _words_decide(self, candidate: _Candidate, audio: np.ndarray, heard: int | None) -> None:
        try:
            real = holds_a_real_word(await self._kit.stages.transcribe(audio, over_answer=True))
        except StageFailure as failure:  # never miss a real interruption for want of words
            logger.warning("an interruption's words are unknown (%s): taken as real", failure.message)
            real = True
        if self._candidate is not candidate:
            return
        candidate.check = None
        stop = candidate.stopped()
        if real:
            self._confirm(candidate)
        elif heard is None:
            assert stop is not None
            self._dismiss(candidate, stop)
        elif stop is not None:  # it ended while its words were heard: the last look
            self._follow(candidate, next(e for e in candidate.events if e.vad is stop))
        else:
            candidate.look_at = heard + ms_to_samples(RECHECK_MS)
            self._audio.notify_at(candidate.look_at)

    def _confirm(self, candidate: _Candidate) -> None:
        """A real interruption: turn-taking gets it from its onset, as if never held. A
        barge-in has stopped playback by the time ``resume`` runs (then it does nothing):
        the server's playback is cleared, never resumed for a moment first."""
        self._candidate = None
        self._kit.metrics.interruption(True, self._heard_s(candidate))
        first, *rest = candidate.events
        self._act(first)
        self._kit.playback.resume()
        for event in rest:
            self.take(event)

    def _heard_s(self, candidate: _Candidate) -> float:
        """Input audio since the candidate's onset: a client streams in real time, so this is
        how long the speech went on over the answer before the decision."""
        return (self._audio.received_ms - samples_to_ms(candidate.started.start_sample)) / 1000

    def _dismiss(self, candidate: _Candidate, stop: SpeechStopped) -> None:
        """Not an interruption: its events are dropped up to its end, the answer resumes,
        and what came after is taken afresh."""
        self._candidate = None
        self._kit.metrics.interruption(False, self._heard_s(candidate))
        self._kit.playback.resume()
        logger.debug(
            "%d ms of speech during an answer: not an interruption", samples_to_ms(stop.end_sample - stop.start_sample)
        )
        ends = next(i for i, e in enumerate(candidate.events) if e.vad is stop)
        for event in candidate.events[ends + 1 :]:
            self.take(event)

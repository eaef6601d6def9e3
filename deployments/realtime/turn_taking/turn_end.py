"""``semantic_vad``: whether a pause ends the turn is the end-of-turn model's call.

Under ``semantic_vad`` the VAD reports a stop after a short pause (``SEMANTIC_PAUSE_MS``),
and the utterance so far goes to Smart Turn (``handlers.turn_end``). Smart Turn reads
prosody, and a fragment said like a statement ("Can you tell me") sounds whole to it, so
the words are a second signal: the utterance's transcript goes to the LLM, which says how
likely the message is to end there (``Stages.message_ends``). Words sure either way decide
(a fragment is held, a whole message ends), else Smart Turn does. Complete, the turn ends at
once: sooner than a silence timer would end it. The verdict is asked when the pause
begins, with the pause's own transcript (speculation's), so it is mostly in hand by the time
the pause has lasted ``SEMANTIC_PAUSE_MS``, and the utterance is transcribed once.
Incomplete ("I'd like to book a flight to …"), the turn is held: if the user speaks again
before the pause has lasted the bound ``eagerness`` sets (``EAGERNESS_SILENCE_MS``), the
speech continues the same utterance (one item, no new ``speech_started``); if not, the turn
ends at the bound. Speculation starts at the pause as always, so a confident end costs
nothing extra; a turn that goes on drops it.
If the model fails the turn ends at once (logged): an answer late is worse than early.

The bound is counted in input audio, as every VAD time is. A client that stops sending after
its question (push-to-talk, a script) never sends the pause's end, so a held turn also ends
once no audio at all has come for as long as the rest of the bound would take in real time
(plus ``STALLED_INPUT_S``): it is not held for ever, and audio still coming is never cut.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import cast

import numpy as np

from deployments.realtime.audio_input import AudioInput
from deployments.realtime.failures import StageFailure
from deployments.realtime.kit import SessionKit
from handlers.audio import SPEECH_RATE
from handlers.vad import SpeechStopped, ms_to_samples

logger = logging.getLogger(__name__)

EAGERNESS_SILENCE_MS = {"high": 1000, "medium": 2000, "auto": 2000, "low": 3000}
"""The longest pause an incomplete turn waits through, by ``eagerness``."""
COMPLETE_ABOVE = 0.5
"""Smart Turn's probability above which a turn is complete (its reference threshold)."""
STALLED_INPUT_S = 0.5
"""How long past due the pause's audio may be before the client counts as no longer sending
(real-time clients send a frame every 20-100 ms)."""
WORDS_END_ABOVE = 0.03
"""The LLM's probability of the message ending, at or below which its words are a fragment
and the turn is held, however it sounds. SmolLM2-135M (vLLM) on tiny.en's transcripts of
Piper-spoken fragments: 0.000 to 0.026 ("Tell me about."); of whole questions 0.04 to 0.95,
but "Thank you." 0.011 and "I need help with my order." 0.003, which then wait for the
eagerness bound (docs/bench/README.md)."""
WORDS_WHOLE_ABOVE = 0.3
"""Above this the words are a whole message and the turn ends, however it sounds: Smart Turn
heard Piper's "What color is the sky?" as unfinished (0.16-0.45), and held it to the bound,
while its words read 0.39 (fragments: at most 0.026). Between the two, Smart Turn decides."""

EndTurn = Callable[[SpeechStopped, np.ndarray, float | None], None]


@dataclass
class _Verdict:
    """Whether the utterance ending at ``end_sample`` is a complete turn, being asked."""

    end_sample: int
    complete: "asyncio.Future[bool]"
    asking: "asyncio.Task[None]"

    def cancel(self) -> None:
        self.asking.cancel()
        self.complete.cancel()


@dataclass
class _Held:
    stop: SpeechStopped
    audio: np.ndarray
    lag_s: float | None
    deadline: int
    """The sample at which the pause has lasted the bound: the turn ends there."""
    asked: _Verdict
    decision: asyncio.Task[None] | None = None


class TurnEnd:
    def __init__(self, kit: SessionKit, audio: AudioInput, end_turn: EndTurn) -> None:
        """``end_turn(stop, utterance, lag_s)``: turn-taking's end of the turn."""
        self._kit, self._audio, self._end_turn = kit, audio, end_turn
        self._held: _Held | None = None
        self._earlier: _Held | None = None
        """A held turn the user went on speaking: what the utterance began with."""
        self._paused: _Verdict | None = None
        """The verdict asked when the current pause began."""

    @property
    def continuing(self) -> bool:
        """Whether the speech under way goes on with a turn held at a pause."""
        return self._earlier is not None

    def utterance(self, audio: np.ndarray) -> np.ndarray:
        """``audio`` of the utterance under way, with what it continues put before it."""
        return audio if self._earlier is None else np.concatenate([self._earlier.audio, audio])

    def paused(self, end_sample: int, utterance: np.ndarray, transcript: "asyncio.Future[str]") -> None:
        """A pause began after ``utterance`` (``transcript``: speculation's): ask the verdict now."""
        self.pause_ended()
        self._paused = self._ask(end_sample, utterance, asyncio.shield(transcript))

    def pause_ended(self) -> None:
        """The pause did not become a stop this verdict could decide: it is void."""
        verdict, self._paused = self._paused, None
        if verdict is not None:
            verdict.cancel()

    def stopped(self, stop: SpeechStopped, audio: np.ndarray, lag_s: float | None, eagerness: str) -> None:
        """The VAD heard a pause of ``SEMANTIC_PAUSE_MS``: hold the turn for the verdict."""
        earlier, self._earlier = self._earlier, None
        if earlier is not None:  # one utterance from the first onset
            stop = SpeechStopped(earlier.stop.start_sample, stop.end_sample, too_short=False)
        utterance = audio if earlier is None else np.concatenate([earlier.audio, audio])
        asked, self._paused = self._paused, None
        if asked is None or asked.end_sample != stop.end_sample:  # no pause heard this utterance
            if asked is not None:
                asked.cancel()
            asked = self._ask(stop.end_sample, utterance, self._kit.stages.transcribe(utterance))
        deadline = stop.end_sample + ms_to_samples(EAGERNESS_SILENCE_MS[eagerness])  # the pause began there
        held = self._held = _Held(stop, utterance, lag_s, deadline, asked)
        held.decision = self._kit.spawn(self._decide(held))
        self._audio.notify_at(held.deadline)

    def resumed(self) -> bool:
        """Speech started: ``True`` when it goes on with a held turn (not a new one)."""
        held, self._held = self._held, None
        if held is None:
            return False
        self._cancel(held)
        self._earlier = held
        return True

    def heard(self, sample: int) -> None:
        held = self._held
        if held is not None and sample >= held.deadline:
            self._end(held)  # a pause as long as the bound: the turn is over, complete or not

    def reset(self) -> None:
        self.pause_ended()
        if self._held is not None:
            self._cancel(self._held)
        self._held = self._earlier = None

    def _ask(self, end_sample: int, utterance: np.ndarray, transcript: Awaitable[str]) -> _Verdict:
        complete: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        return _Verdict(end_sample, complete, self._kit.spawn(self._judge(utterance, transcript, complete)))

    async def _judge(self, utterance: np.ndarray, transcript: Awaitable[str], complete: "asyncio.Future[bool]") -> None:
        try:
            verdict = await self._complete(utterance, transcript)
        except StageFailure as failure:
            logger.warning("end-of-turn model: %s; the turn ends now", failure.message)
            verdict = True
        if not complete.done():
            complete.set_result(verdict)

    async def _decide(self, held: _Held) -> None:
        complete = await held.asked.complete
        if not complete and not await self._input_stalls(held):
            return  # the audio reaches the bound: ``heard`` ends the turn there
        if self._held is held:
            self._end(held)

    async def _input_stalls(self, held: _Held) -> bool:
        """Whether the client stops sending before its audio reaches the bound: no audio at all
        comes while the rest of it would take in real time, and ``STALLED_INPUT_S`` more."""
        while (missing := held.deadline - self._audio.arrived_sample) > 0:
            arrived = self._audio.arrived_sample
            await asyncio.sleep(missing / SPEECH_RATE + STALLED_INPUT_S)
            if self._audio.arrived_sample == arrived:
                return True
        return False

    async def _complete(self, utterance: np.ndarray, transcript: Awaitable[str]) -> bool:
        """Smart Turn and the words, asked at once: words sure either way decide, else the
        sound does."""
        results = await asyncio.gather(
            self._kit.stages.end_of_turn(utterance), self._words_end(transcript), return_exceptions=True
        )
        for result in results:
            if isinstance(result, BaseException):
                raise result  # each is awaited: none is left unretrieved
        sound, words = cast(tuple[float, float | None], tuple(results))
        if words is not None and (words <= WORDS_END_ABOVE or words > WORDS_WHOLE_ABOVE):
            return words > WORDS_WHOLE_ABOVE
        return sound > COMPLETE_ABOVE

    async def _words_end(self, transcript: Awaitable[str]) -> float | None:
        """How likely the words are to end the message (``None``: no words were heard)."""
        words = await transcript
        return await self._kit.stages.message_ends(words) if words.strip() else None

    def _end(self, held: _Held) -> None:
        self._held = None
        self._cancel(held)
        self._end_turn(held.stop, held.audio, held.lag_s)

    @staticmethod
    def _cancel(held: _Held) -> None:
        held.asked.cancel()
        if held.decision is not None and held.decision is not asyncio.current_task():
            held.decision.cancel()

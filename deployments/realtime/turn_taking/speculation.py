"""Speculation: answering in the pause that may end the user's turn, unseen until it does.

At a pause (``SpeechPaused``) the utterance so far is transcribed and, when a response
would follow, answered in a *held* run: a run whose events the outbox keeps back. If the
pause becomes the end of the turn, the transcript is reused and the held run adopted: shown
if it answers exactly the conversation the turn ended with (its events go out in order,
and the LLM was called once), else cancelled on its replicas and replaced by a fresh run.
If speech resumes, both are dropped and the client has seen nothing.
"""

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass

import numpy as np

from deployments.realtime.conversation import NothingToAnswer, prompt
from deployments.realtime.items import Item
from deployments.realtime.kit import SessionKit
from deployments.realtime.response.responder import Responder
from deployments.realtime.response.run import DropReason, ResponseRun
from deployments.realtime.spoken_words import holds_speech
from deployments.realtime.timeline import Timeline
from deployments.realtime.turn_taking.transcription import stt_future
from handlers.llm import ChatMessage


@dataclass
class Speculation:
    end_sample: int
    """Where the utterance it heard ends: the turn's end must be the same."""
    transcript: "asyncio.Future[str]"
    timeline: Timeline
    run: ResponseRun | None = None
    """The held answer (``None``: no response was to follow)."""


class Speculator:
    def __init__(self, kit: SessionKit, responder: Responder) -> None:
        self._kit, self._responder = kit, responder
        self._current: Speculation | None = None

    @property
    def active(self) -> bool:
        """Whether the user is in a pause that is being answered speculatively."""
        return self._current is not None

    def pause(
        self, end_sample: int, audio: np.ndarray, lag_s: float | None, turn_item_id: str | None
    ) -> "asyncio.Future[str]":
        """The user paused after ``audio``: transcribe it (the transcript is returned) and, if a
        response would follow, answer it held (its first output follows ``turn_item_id``, the
        user's turn)."""
        self.drop("new_pause")
        timeline = Timeline(heard_lag_s=lag_s)
        timeline.mark("speech_paused")
        timeline.vad_lag_ms = None if lag_s is None else round(lag_s * 1000, 1)
        transcript = stt_future(self._kit.stages, audio, timeline)
        speculation = self._current = Speculation(end_sample, transcript, timeline)
        if self._kit.settings.create_response and self._responder.current is None:
            history = self._kit.conversation.items  # the conversation this turn would extend
            run = self._responder.new_run(
                _speculative_prompt(history, self._kit.settings.instructions, transcript), timeline
            )
            run.follows = turn_item_id
            self._kit.outbox.hold(run.id)
            speculation.run = self._responder.start(run)
        return transcript

    def drop(self, reason: DropReason) -> None:
        """Speech resumed (or the input restarted): nothing of the pause is kept."""
        speculation, self._current = self._current, None
        if speculation is not None:
            speculation.transcript.cancel()
            if speculation.run is not None:
                self._responder.abandon(speculation.run, reason)

    def take(self, end_sample: int) -> Speculation | None:
        """The turn ended at ``end_sample``: the speculation, if it heard exactly that audio
        (else it is dropped)."""
        if self._current is not None and self._current.end_sample != end_sample:
            self.drop("turn_ended_elsewhere")
        speculation, self._current = self._current, None
        return speculation

    def answer_turn(
        self,
        current: Awaitable[list[ChatMessage]],
        timeline: Timeline,
        held: ResponseRun | None,
        turn_item_id: str,
    ) -> None:
        """The user's turn ended: answer ``current`` (the conversation as it now stands).

        The answer is shown once the turn is known to hold words: ``held``, the pause's
        answer, if it answers exactly ``current``, else a run started now and held until its
        prompt is ready. A turn of no words gets no response (``NothingToAnswer``)."""
        if held is None:
            held = self._responder.new_run(current, timeline)
            held.follows = turn_item_id
            self._kit.outbox.hold(held.id)
            self._responder.start(held)
            answered = held.prompt
        else:
            answered = asyncio.ensure_future(current)
        self._responder.current = held
        self._kit.spawn(self._confirm(held, answered))

    async def _confirm(self, run: ResponseRun, current: "asyncio.Future[list[ChatMessage]]") -> None:
        held, wanted = await asyncio.gather(run.prompt, current, return_exceptions=True)
        if isinstance(wanted, NothingToAnswer):  # the turn holds no words: no response
            if self._responder.current is run:
                self._responder.abandon(run, "no_words")
            return
        # A failed transcription: answer afresh (and fail there, visibly).
        same = not isinstance(held, BaseException) and held == wanted
        if self._responder.current is not run:
            return  # cancelled meanwhile
        if same and run.status in ("in_progress", "completed"):
            run.timeline.adopted = True
            self._responder.show(run)
            return
        self._responder.abandon(run, "replaced")
        self._responder.answer(current, run.timeline.for_fresh_answer())


async def _speculative_prompt(
    history: Sequence[Item], instructions: str | None, transcript: "asyncio.Future[str]"
) -> list[ChatMessage]:
    text = await asyncio.shield(transcript)  # the item's transcript too: the answer's cancel is not its
    if not holds_speech(text):
        raise NothingToAnswer("the pause")
    return await prompt(history, instructions, then={"role": "user", "content": text})

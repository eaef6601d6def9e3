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

from deployments.realtime.conversation import Conversation, prompt
from deployments.realtime.items import Item
from deployments.realtime.outbox import Outbox
from deployments.realtime.response import Responder
from deployments.realtime.response_run import ResponseRun
from deployments.realtime.settings import SessionSettings
from deployments.realtime.stages import Stages
from deployments.realtime.supervision import Spawn
from deployments.realtime.timeline import Timeline
from deployments.realtime.transcription import stt_future
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
    def __init__(
        self,
        *,
        stages: Stages,
        conversation: Conversation,
        responder: Responder,
        outbox: Outbox,
        settings: SessionSettings,
        spawn: Spawn,
    ) -> None:
        self._stages = stages
        self._conversation = conversation
        self._responder = responder
        self._outbox = outbox
        self._settings = settings
        self._spawn = spawn
        self._current: Speculation | None = None

    @property
    def active(self) -> bool:
        """Whether the user is in a pause that is being answered speculatively."""
        return self._current is not None

    def pause(self, end_sample: int, audio: np.ndarray, lag_s: float | None, turn_item_id: str | None) -> None:
        """The user paused after ``audio``: transcribe it and, if a response would follow,
        answer it held (its first output follows ``turn_item_id``, the user's turn)."""
        self.drop()
        timeline = Timeline()
        timeline.mark("speech_paused")
        timeline.vad_lag_ms = None if lag_s is None else round(lag_s * 1000, 1)
        transcript = stt_future(self._stages.transcribe(audio), timeline)
        speculation = self._current = Speculation(end_sample, transcript, timeline)
        if self._settings.create_response and self._responder.current is None:
            history = self._conversation.items  # the conversation this turn would extend
            run = self._responder.new_run(
                _speculative_prompt(history, self._settings.instructions, transcript), timeline
            )
            run.follows = turn_item_id
            self._outbox.hold(run.id)
            speculation.run = self._responder.start(run)

    def drop(self) -> None:
        """Speech resumed (or the input restarted): nothing of the pause is kept."""
        speculation, self._current = self._current, None
        if speculation is not None:
            speculation.transcript.cancel()
            if speculation.run is not None:
                self._responder.abandon(speculation.run)

    def take(self, end_sample: int) -> Speculation | None:
        """The turn ended at ``end_sample``: the speculation, if it heard exactly that audio
        (else it is dropped)."""
        if self._current is not None and self._current.end_sample != end_sample:
            self.drop()
        speculation, self._current = self._current, None
        return speculation

    def adopt(self, run: ResponseRun, current: Awaitable[list[ChatMessage]]) -> None:
        """The turn ended: the held ``run`` is the response, shown once it is confirmed to
        answer ``current`` (the conversation as it now stands), else replaced."""
        self._responder.current = run
        self._spawn(self._confirm(run, asyncio.ensure_future(current)))

    async def _confirm(self, run: ResponseRun, current: "asyncio.Future[list[ChatMessage]]") -> None:
        try:
            same = await run.prompt == await current
        except Exception:  # a transcription failed: answer afresh (or fail there, visibly)
            same = False
        if self._responder.current is not run:
            return  # cancelled meanwhile
        if same and run.status in ("in_progress", "completed"):
            run.timeline.adopted = True
            self._responder.show(run)
            return
        self._responder.abandon(run)
        self._responder.answer(current, run.timeline.for_fresh_answer())


async def _speculative_prompt(
    history: Sequence[Item], instructions: str | None, transcript: "asyncio.Future[str]"
) -> list[ChatMessage]:
    messages = await prompt(history, instructions)
    text = await transcript
    return [*messages, {"role": "user", "content": text}] if text else messages

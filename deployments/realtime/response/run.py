"""One response as it runs: its id, its outputs, its state, and the work to stop on cancel.

Everything a response sends is tagged with its id, so the outbox can drop exactly its
output when it is cancelled. A *held* run (a speculative answer, started in the pause
before the turn is known to have ended) is simply one whose id the outbox holds.
"""

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal

from deployments.realtime.items import AssistantMessage, Item
from deployments.realtime.settings import ResponseOptions
from deployments.realtime.stages import StageStream
from deployments.realtime.timeline import Timeline
from handlers.llm import ChatMessage

Status = Literal["in_progress", "completed", "cancelled", "failed"]
CancelReason = Literal["turn_detected", "client_cancelled"]
DropReason = Literal[
    "speech_resumed",
    "input_restarted",
    "new_pause",
    "too_short",
    "turn_ended_elsewhere",
    "no_words",
    "replaced",
    "not_answered",
    "turn_detected",
    "client_cancelled",
    "cancelled",
]
"""Why a held answer was dropped unseen: the speech went on (resumed, a new pause, a turn
ending elsewhere), the turn was no turn (too short, no words), the answer was replaced by a
fresh one, no answer was due, or it was cancelled as it was held."""


@dataclass(eq=False)
class ResponseRun:
    id: str
    answer: AssistantMessage
    """The spoken or written answer (an output only once the model writes text)."""
    generation: int
    prompt: "asyncio.Future[list[ChatMessage]]"
    timeline: Timeline
    options: ResponseOptions = ResponseOptions()
    follows: str | None = None
    """The item a held run's first output follows once shown (the user's turn)."""
    script: str | None = None
    """Words said as they are, without the LLM (a call's greeting; ``None``: the LLM answers)."""
    outputs: list[Item] = field(default_factory=list)
    """The items announced so far, in output order: the answer, function calls."""
    status: Status = "in_progress"
    cut_at_cap: bool = False
    """The model stopped at its token cap: done, the client is told ``incomplete``."""
    streams: set[StageStream[Any]] = field(default_factory=set)
    task: "asyncio.Task[None] | None" = None

    def stop(self) -> None:
        """Stop its work: the streams on their replicas, its task, its prompt."""
        for stream in self.streams:
            stream.cancel()
        if self.task is not None:
            self.task.cancel()
        self.prompt.cancel()

    def output_index(self, item: Item) -> int:
        return next(index for index, output in enumerate(self.outputs) if output is item)

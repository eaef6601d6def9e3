"""What a phone call does beyond the conversation: it greets, it hangs up or transfers when
the agent says so, it hangs up on a caller gone silent, and it leaves a draining replica
between turns.

The Twilio route is the session's client: it writes the call's opening settings and reads
the server's events. So call control lives on that side, as any client of ``/v1/realtime``
would do it: ``end_call`` and ``transfer_call`` are ordinary function tools in the call's
settings, acted on when a completed ``response.done`` holds a call to them and its audio
has played (the answer's done mark came back). A ``/v1/realtime`` client that declares the
same tools gets the same function calls to handle itself; nothing of this is in the session.

:class:`CallControl` decides; the transport (:mod:`deployments.realtime.transports.twilio`) says the
lines, keeps the call's ending where the call's next webhook reads it (:class:`CallLine`),
and closes the stream.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from openai import BaseModel as OpenAIModel
from openai.types.realtime import (
    InputAudioBufferSpeechStartedEvent,
    InputAudioBufferSpeechStoppedEvent,
    ResponseCreatedEvent,
    ResponseDoneEvent,
)

from deployments.realtime.protocol import SessionDrainingEvent
from deployments.realtime.transports.config import CallControlConfig

END_CALL = "end_call"
TRANSFER_CALL = "transfer_call"


@dataclass(frozen=True)
class CallEnding:
    """How a call ends once its stream closes: the TwiML its next webhook answers with."""

    how: Literal["hang_up", "transfer"]
    to: str = ""

    def __str__(self) -> str:
        return self.how if self.how == "hang_up" else f"transfer {self.to}"

    @classmethod
    def parse(cls, text: str) -> "CallEnding | None":
        """The ending ``str`` wrote (``None`` for ``""``: the call goes on)."""
        how, _, to = text.partition(" ")
        if how == "hang_up":
            return cls("hang_up")
        return cls("transfer", to) if how == "transfer" and to else None


@dataclass(frozen=True)
class Say:
    """The agent says ``text`` as it is (the silence prompt)."""

    text: str


@dataclass(frozen=True)
class Leave:
    """The stream closes with the call still going: its next stream resumes the session."""


Action = Say | CallEnding | Leave


class CallLine(Protocol):
    """Where a call's next webhook and stream find what to do (the session store)."""

    async def resumes_with(self, resume_token: str) -> None: ...

    async def ends(self, ending: CallEnding) -> None: ...


class CallControl:
    """One call's control: fed the server's events (:meth:`seen`) and the played answers
    (:meth:`played`), it says what is due (:meth:`due`) and when to look again (:meth:`wait_s`)."""

    def __init__(self, config: CallControlConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._open: set[str] = set()
        """Responses created whose audio has not played to its end."""
        self._speaking = False
        self._answer_due = False
        """The caller's speech stopped and no response has started since."""
        self._quiet_since: float | None = None
        """When the caller and the agent both fell silent (``None``: one of them is not)."""
        self._prompted = False
        self._ending: tuple[str, CallEnding] | None = None
        """The response whose playing out ends the call, and how."""
        self._due: Action | None = None
        self._leaving = False

    def tools(self) -> list[dict[str, Any]]:
        """The call-control functions the model is offered (none unless configured)."""
        empty = {"type": "object", "properties": {}}
        tools = []
        if self._config.end_call:
            what = "End the phone call. Call it after saying goodbye, when the caller is done or asks to hang up."
            tools.append({"type": "function", "name": END_CALL, "description": what, "parameters": empty})
        if self._config.transfer_to is not None:
            what = "Transfer the caller to a person. Call it after saying so, when the caller asks for a human."
            tools.append({"type": "function", "name": TRANSFER_CALL, "description": what, "parameters": empty})
        return tools

    def seen(self, event: OpenAIModel) -> None:
        """A server event the call's client got."""
        if isinstance(event, InputAudioBufferSpeechStartedEvent):
            self._speaking, self._quiet_since, self._prompted = True, None, False
        elif isinstance(event, InputAudioBufferSpeechStoppedEvent):
            self._speaking, self._answer_due = False, True
        elif isinstance(event, ResponseCreatedEvent) and event.response.id:
            self._open.add(event.response.id)
            self._answer_due, self._quiet_since = False, None
        elif isinstance(event, ResponseDoneEvent) and event.response.id:
            ending = self._ending_asked(event)
            if ending is not None:
                self._ending = (event.response.id, ending)
        elif isinstance(event, SessionDrainingEvent):
            self._leaving = True
            self._check_leaving()

    def _ending_asked(self, event: ResponseDoneEvent) -> CallEnding | None:
        if event.response.status != "completed":
            return None
        for item in event.response.output or []:
            name = getattr(item, "name", None)
            if getattr(item, "type", None) != "function_call":
                continue
            if name == END_CALL and self._config.end_call:
                return CallEnding("hang_up")
            if name == TRANSFER_CALL and self._config.transfer_to is not None:
                return CallEnding("transfer", self._config.transfer_to)
        return None

    def played(self, response_id: str) -> None:
        """Response ``response_id``'s audio has played to its end (or was cleared)."""
        self._open.discard(response_id)
        if self._ending is not None and self._ending[0] == response_id:
            self._due = self._ending[1]
            return
        if not self._open and not self._speaking and not self._answer_due:
            self._quiet_since = self._clock()
        self._check_leaving()

    def _check_leaving(self) -> None:
        """A draining call leaves between turns: no one speaking, no answer owed or playing."""
        if self._leaving and self._due is None and not (self._open or self._speaking or self._answer_due):
            self._due = Leave()

    def wait_s(self) -> float | None:
        """How long until a silence step is due (``None``: none is counting)."""
        rule = self._config.hang_up_on_silence
        if rule is None or self._quiet_since is None:
            return None
        after_s = rule.hang_up_after_s if self._prompted else rule.prompt_after_s
        return max(self._quiet_since + after_s - self._clock(), 0.0)

    def due(self) -> Action | None:
        """What is to be done now, once."""
        due, self._due = self._due, None
        if due is not None:
            return due
        rule = self._config.hang_up_on_silence
        if rule is None or self.wait_s() != 0.0:
            return None
        self._quiet_since = None
        if self._prompted:
            return CallEnding("hang_up")
        self._prompted = True
        return Say(rule.prompt)

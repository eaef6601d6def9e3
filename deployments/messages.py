"""Typed items that travel between the ingress and the model deployments.

They replace the threaded pipeline's queue payloads: each request carries the scope ticket
of the response it works for, so a worker can stop (and its output be discarded) the moment
that response is cancelled.
"""

from dataclasses import dataclass

from cancel import ScopeTicket
from deployments.telemetry import Carrier
from handlers.llm import ChatMessage
from handlers.tools import ToolUse


@dataclass(frozen=True)
class LLMRequest:
    messages: list[ChatMessage]
    ticket: ScopeTicket
    request_id: str
    max_tokens: int | None = None
    """The client's cap on the answer (``session.max_output_tokens``), within the model's."""
    tools: ToolUse | None = None
    """Functions the model may call (``None``: none, or ``tool_choice: "none"``)."""
    trace: Carrier | None = None
    """The caller's span, for the replica's (``None``: not traced)."""
    answer_tokens: int | None = None
    """Past this many tokens the answer ends with its sentence (``None``: no such bound)."""


@dataclass(frozen=True)
class TTSRequest:
    text: str
    ticket: ScopeTicket
    trace: Carrier | None = None
    """The caller's span, for the replica's (``None``: not traced)."""


class StoppedAsStale(RuntimeError):
    """A worker stopped a request early because its session's scope superseded the request's
    generation. The ingress expects this only for a response it cancelled itself; for any
    other response it is a failure to report, never an answer to pass off as complete."""

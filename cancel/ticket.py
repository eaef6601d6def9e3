"""ScopeTicket: what a request carries to a worker so the worker can watch its session's scope."""

from dataclasses import dataclass

from ray.actor import ActorHandle

SessionState = tuple[int, int]
"""``(version, generation)`` of one session: the version orders the writer's changes."""


@dataclass(frozen=True, slots=True)
class ScopeTicket:
    """The session, its host, the generation the request works for, and the writer's state.

    ``version`` and ``current`` are the writer's state when the ticket was issued, so a worker
    knows about every cancel before that moment without asking the host; ``current`` differs
    from ``generation`` only for a ticket issued for an already superseded generation, which is
    stale from birth.
    """

    session_id: str
    host: ActorHandle
    version: int
    generation: int
    current: int

"""Generation tokens: a generation qualified by the incarnation (epoch) of the host that holds it.

A scope host keeps its state in memory only. If it dies and Ray restarts it, the session's
generation counter is gone; were workers to compare bare generations, the restarted host
could hand out a generation equal to one captured before the crash and make stale work look
fresh. Every host incarnation therefore draws a random 62-bit epoch and workers compare
``token = (epoch << 32) | generation``: a token of one incarnation never equals a token of
another.
"""

import secrets
from dataclasses import dataclass

from ray.actor import ActorHandle

from cancel.scope import GENERATION_MASK

EPOCH_BITS = 62
STALE_TOKEN = -1
"""Matches no ticket (tokens are never negative): a view whose state is lost reports stale."""


def new_epoch() -> int:
    """A random epoch for one host incarnation."""
    return secrets.randbits(EPOCH_BITS)


def make_token(epoch: int, generation: int) -> int:
    """The value workers compare: a generation of one host incarnation."""
    return (epoch << 32) | (generation & GENERATION_MASK)


@dataclass(frozen=True, slots=True)
class ScopeTicket:
    """What a request carries to a worker so the worker can watch the session's scope.

    ``token`` is the generation the request works for. ``version`` and ``state_token`` are the
    writer's state when the ticket was issued, so a worker knows about every cancel before
    that moment without asking the host; they differ from ``token`` only for a ticket issued
    for an already superseded generation, which is stale from birth.
    """

    session_id: str
    host: ActorHandle
    version: int
    token: int
    state_token: int

    @property
    def generation(self) -> int:
        """The scope generation the ticket was issued for (to tag output with)."""
        return self.token & GENERATION_MASK

"""Cancellation scopes shared across Ray processes.

Writer side (ingress): ``ScopeDirectory`` -> ``SessionScope`` (a ``CancelScope`` that
publishes its cancels), ``SessionScope.ticket()`` -> ``ScopeTicket`` sent with each request.
Worker side: ``ScopeCache.for_current_loop().watch(ticket)`` -> ``ScopeView`` whose
``is_stale()`` is a local read kept fresh by long-poll push from the ``ScopeHost`` actors.
"""

from cancel.background import spawn_detached
from cancel.cache import ScopeCache, ScopeView
from cancel.host import ScopeHost
from cancel.placement import ScopeDirectory, ScopePlacementConfig
from cancel.scope import CancelScope
from cancel.session import SessionScope
from cancel.ticket import ScopeTicket

__all__ = [
    "CancelScope",
    "ScopeCache",
    "ScopeDirectory",
    "ScopeHost",
    "ScopePlacementConfig",
    "ScopeTicket",
    "ScopeView",
    "SessionScope",
    "spawn_detached",
]

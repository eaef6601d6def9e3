"""ScopeHost: an async Ray actor holding the authoritative scope state of many sessions.

Per session it keeps ``(version, token)``: the version orders the single writer's updates,
the token is what workers compare (see ``cancel.tokens``). Workers learn of changes through
``wait_changes``, a batched long-poll, so one pending call per worker process serves every
session that process watches on this host.
"""

import asyncio
import os
from typing import Any

import ray

from cancel.tokens import make_token, new_epoch

SessionState = tuple[int, int]
"""``(version, token)`` of one session."""


class ScopeHost:
    """Scope state of the sessions placed on this host; use as ``ray.remote(ScopeHost)``.

    State is in memory only. A restarted incarnation draws a new epoch and knows no sessions,
    so work issued under the old one can never look fresh again.
    """

    def __init__(self) -> None:
        self._epoch = new_epoch()
        self._sessions: dict[str, SessionState] = {}
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._pending_polls = 0

    async def open(self, session_id: str) -> int:
        """Start holding a session (idempotent); return this incarnation's epoch."""
        self._sessions.setdefault(session_id, (0, make_token(self._epoch, 0)))
        return self._epoch

    async def publish(self, session_id: str, version: int, token: int) -> bool:
        """Store a newer state of a session; False when the session is unknown here.

        Updates that arrive out of order (``version`` not above the stored one) are ignored.
        An unknown session means it was closed, or this host restarted and lost it: the writer
        re-opens it to learn the new epoch.
        """
        state = self._sessions.get(session_id)
        if state is None:
            return False
        if version > state[0]:
            self._sessions[session_id] = (version, token)
            self._notify(session_id)
        return True

    async def close(self, session_id: str) -> None:
        """Forget a session; its watchers learn it is gone (and stop its work)."""
        if self._sessions.pop(session_id, None) is not None:
            self._notify(session_id)

    async def wait_changes(
        self, known: dict[str, int], timeout_s: float
    ) -> dict[str, SessionState | None]:
        """Long-poll: the sessions of ``known`` whose state is newer than the version given.

        Returns at once if any is newer (or unknown here, reported as None), else waits until
        one changes or ``timeout_s`` passes (then returns ``{}``). Only newer versions count:
        a ticket may carry a version whose publish is still on its way, and that must not read
        as a change.
        """
        changes = self._changes(known)
        if changes:
            return changes
        event = asyncio.Event()
        for session_id in known:
            self._waiters.setdefault(session_id, set()).add(event)
        self._pending_polls += 1
        try:
            async with asyncio.timeout(timeout_s):
                while not changes:
                    event.clear()
                    await event.wait()
                    changes = self._changes(known)
        except TimeoutError:
            pass
        finally:
            self._pending_polls -= 1
            for session_id in known:
                waiters = self._waiters[session_id]
                waiters.discard(event)
                if not waiters:
                    del self._waiters[session_id]
        return changes

    async def watch_epoch(self, timeout_s: float) -> int:
        """Return this incarnation's epoch after ``timeout_s``.

        The directory keeps one such call pending per host: its failure, or a different epoch
        in its answer, is how the writer learns the host restarted.
        """
        await asyncio.sleep(timeout_s)
        return self._epoch

    async def stats(self) -> dict[str, Any]:
        """Counters for tests and benchmarks."""
        return {
            "epoch": self._epoch,
            "sessions": len(self._sessions),
            "pending_polls": self._pending_polls,
            "pid": os.getpid(),
            "actor_id": ray.get_runtime_context().get_actor_id(),
        }

    def _changes(self, known: dict[str, int]) -> dict[str, SessionState | None]:
        changes: dict[str, SessionState | None] = {}
        for session_id, version in known.items():
            state = self._sessions.get(session_id)
            if state is None or state[0] > version:
                changes[session_id] = state
        return changes

    def _notify(self, session_id: str) -> None:
        for event in self._waiters.get(session_id, ()):
            event.set()

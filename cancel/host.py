"""ScopeHost: an async Ray actor holding the scope state of many sessions, and its change log.

Per session it keeps the writer's ``(version, generation)``; it never invents state, so a host
that Ray restarted knows a session again exactly as its writer republishes it. Every change
takes the next number of the host's sequence; a worker's long-poll (``wait_changes``) asks
for what changed after the last number it saw, so a cancel costs one small entry per worker
process, whatever the number of sessions.
"""

import asyncio
import os
import secrets
from collections import OrderedDict, deque
from typing import Any

import ray

from cancel.ticket import SessionState

EPOCH_BITS = 62
NO_EPOCH = -1
"""Names no incarnation (epochs are never negative): a first poll or watch uses it."""
CLOSED_KEPT = 10_000
"""Closed sessions remembered in the log, so workers that still watch one stop its work."""

Change = tuple[str, SessionState | None]
"""A session and its new state, ``None`` once closed."""
Changes = tuple[int, int, list[Change]]
"""A poll's answer: the host's epoch, the sequence number it is complete up to, the changes."""


class ScopeHost:
    """Scope state of the sessions placed on this host; use as ``ray.remote(ScopeHost)``.

    State is in memory only. Each incarnation draws a random ``epoch``: sequence numbers of
    one incarnation mean nothing to another, so a poll that names an old epoch gets the whole
    log.
    """

    def __init__(self, closed_kept: int = CLOSED_KEPT) -> None:
        self._closed_kept = closed_kept
        self._epoch = secrets.randbits(EPOCH_BITS)
        self._sessions: dict[str, SessionState] = {}
        self._log: OrderedDict[str, tuple[int, SessionState | None]] = OrderedDict()
        """Each session's latest change and its sequence number, oldest change first."""
        self._closed: deque[str] = deque()
        self._seq = 0
        self._changed = asyncio.Event()
        self._pending_polls = 0

    async def publish(self, session_id: str, version: int, generation: int) -> None:
        """Store the writer's state of a session unless a newer one is stored.

        Opening a session and republishing it after a restart are publishes too. Updates that
        arrive out of order (``version`` not above the stored one) are ignored.
        """
        stored = self._sessions.get(session_id)
        if stored is None or version > stored[0]:
            self._sessions[session_id] = (version, generation)
            self._record(session_id, (version, generation))

    async def close(self, session_id: str) -> None:
        """Forget a session; its watchers learn it is gone (and stop its work)."""
        if self._sessions.pop(session_id, None) is None:
            return
        self._record(session_id, None)
        self._closed.append(session_id)
        if len(self._closed) > self._closed_kept:
            forgotten = self._closed.popleft()
            if forgotten not in self._sessions:
                self._log.pop(forgotten, None)

    async def wait_changes(self, epoch: int, since: int, timeout_s: float) -> Changes:
        """Long-poll: every change after sequence number ``since`` of incarnation ``epoch``.

        Returns at once if there are any, else when the next change comes or after
        ``timeout_s`` (then with no changes). A poll naming another epoch (a worker's first,
        or one from before a restart) gets the whole log: every session's latest state.
        """
        if epoch != self._epoch:
            since = 0
        if self._seq == since:
            self._pending_polls += 1
            try:
                async with asyncio.timeout(timeout_s):
                    await self._changed.wait()
            except TimeoutError:
                pass
            finally:
                self._pending_polls -= 1
        return self._epoch, self._seq, self._changes_after(since)

    async def watch_epoch(self, epoch: int, timeout_s: float) -> int:
        """Return this incarnation's epoch: at once if it is not ``epoch``, else after ``timeout_s``.

        The directory keeps one such call pending per host: a different epoch in its answer
        is how the writer learns the host restarted.
        """
        if epoch == self._epoch:
            await asyncio.sleep(timeout_s)
        return self._epoch

    async def stats(self) -> dict[str, Any]:
        """Counters for tests and benchmarks."""
        return {
            "epoch": self._epoch,
            "seq": self._seq,
            "sessions": len(self._sessions),
            "log_entries": len(self._log),
            "pending_polls": self._pending_polls,
            "pid": os.getpid(),
            "actor_id": ray.get_runtime_context().get_actor_id(),
        }

    def _record(self, session_id: str, state: SessionState | None) -> None:
        self._seq += 1
        self._log[session_id] = (self._seq, state)
        self._log.move_to_end(session_id)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def _changes_after(self, since: int) -> list[Change]:
        """The log's entries newer than ``since``, read from the newest end."""
        changes: list[Change] = []
        for session_id, (seq, state) in reversed(self._log.items()):
            if seq <= since:
                break
            changes.append((session_id, state))
        changes.reverse()
        return changes

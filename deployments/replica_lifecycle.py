"""The sessions an ingress replica holds, from admission to the replica's end.

Admission counts a session against ``max_sessions`` before its first await (a burst cannot
overrun the cap) and refuses the rest with an ``error`` event. Serve ends a replica by
waiting for its requests, and an open WebSocket never ends by itself, so from the replica's
start a watch asks the controller what it is doing with this replica (every
``shutdown_poll_s``, ~1.3 ms of CPU each), and no session is let in before its first look:
Serve still routes new requests to a replica it is moving off a draining node
(``PENDING_MIGRATION``), and one that had no session took a resume there, then drained it
(the simulated cluster's node drain). The watch starts in the replica's constructor: started
by the first request instead, its first look under a redeploy's load took over 2 s, and 100
resuming sessions each waited for it (a ``loadtest.scenarios.disruption redeploy`` run):

- the application is being deleted: close every session with 1001 now;
- this replica alone is being stopped (a new version, a scale-down): drain it. It takes no
  new session, tells each open one that asked (``session.draining``), and after ``drain_s``
  closes those still open with 1012, for their clients to resume on another replica.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from openai.types.realtime import RealtimeErrorEvent
from ray.serve.metrics import Gauge

from cancel import spawn_detached
from deployments.app_status import ReplicaFate, this_replica_fate
from deployments.realtime.protocol import CLOSE_GOING_AWAY, CLOSE_SERVICE_RESTART, ProtocolError, error_event
from deployments.realtime.session import RealtimeSession

logger = logging.getLogger(__name__)

FIRST_LOOK_TIMEOUT_S = 2.0
"""Longest a replica's first session waits for the watch's first look (then it is let in)."""


class ReplicaSessions:
    def __init__(self, max_sessions: int, poll_s: float, drain_s: float, open_gauge: Gauge) -> None:
        self._max_sessions = max_sessions
        self._poll_s = poll_s
        self._drain_s = drain_s
        self._open_gauge = open_gauge
        self._sessions: set[RealtimeSession] = set()
        self.admitted = 0
        """Sessions counted against the cap: from admission (before any await) to the end."""
        self.closing = False
        """The application is being deleted."""
        self.draining = False
        """This replica is being stopped while the application lives on."""
        self._watch: asyncio.Task[None] | None = None
        self._looked = asyncio.Event()
        """The watch has asked the controller once (answered or not)."""

    def __len__(self) -> int:
        return len(self._sessions)

    def start_watch(self) -> None:
        """Watch this replica's fate from now on (call in the replica's event loop)."""
        if self._watch is None or self._watch.done():
            self._watch = spawn_detached(self._watch_replica())

    async def watched(self) -> None:
        """Until the watch runs and has looked once (at most ``FIRST_LOOK_TIMEOUT_S``)."""
        self.start_watch()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FIRST_LOOK_TIMEOUT_S):
                await self._looked.wait()

    def refusal(self) -> RealtimeErrorEvent | None:
        """Why a new session is turned away now, if it is (after :meth:`watched`)."""
        if self.closing:
            return error_event(ProtocolError("server_shutting_down", "the server is shutting down"), "server_error")
        if self.draining:
            draining = ProtocolError("server_draining", "this server replica is being replaced: connect again")
            return error_event(draining, "server_error")
        if self.admitted >= self._max_sessions:
            full = ProtocolError(
                "session_limit_reached",
                f"this server holds its maximum of {self._max_sessions} sessions; try again later",
            )
            return error_event(full, "server_error")
        return None

    def admit(self) -> None:
        """Count a session against the cap (call with no await since :meth:`refusal`)."""
        self.admitted += 1

    def release(self) -> None:
        self.admitted -= 1

    @asynccontextmanager
    async def holding(self, session: RealtimeSession) -> AsyncIterator[None]:
        """``session`` is open on this replica for the block's length, and watched over."""
        self._sessions.add(session)
        self._open_gauge.set(len(self._sessions))
        try:
            yield
        finally:
            self._sessions.discard(session)
            self._open_gauge.set(len(self._sessions))

    async def _watch_replica(self) -> None:
        while not self.closing:
            try:
                fate = await asyncio.to_thread(this_replica_fate)
            except Exception as exc:  # the controller did not answer: decide nothing, look again
                logger.warning("shutdown watch: the Serve controller did not answer: %r", exc)
                fate = ReplicaFate.UNKNOWN
            if fate is ReplicaFate.APP_GOING_AWAY:
                await self.close_all()
            elif fate is ReplicaFate.STOPPING and not self.draining:
                self.draining = True
                spawn_detached(self._drain())
            self._looked.set()
            await asyncio.sleep(self._poll_s)

    async def _drain(self) -> None:
        logger.warning(
            "this ingress replica is being stopped: draining %d sessions for %g s", len(self._sessions), self._drain_s
        )
        for session in list(self._sessions):
            session.draining(self._drain_s)
        await asyncio.sleep(self._drain_s)  # the drain's length, not a wait for an event
        await self._close_each(CLOSE_SERVICE_RESTART, "server draining: resume on another replica")

    async def close_all(self) -> None:
        """The application is going away: end every session now, and take no more."""
        self.closing = True
        await self._close_each(CLOSE_GOING_AWAY, "server shutting down")

    async def _close_each(self, code: int, reason: str) -> None:
        await asyncio.gather(*(s.close(code, reason) for s in list(self._sessions)), return_exceptions=True)

"""SessionScope: the writer's (ingress's) view of one session's scope.

The ingress is the only writer. It keeps a local ``CancelScope`` mirror so that every
operation on its hot path is synchronous and exact at once; a cancel is then published to
the session's host in the background, in order, for workers in other processes to see.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ray.actor import ActorHandle
from ray.exceptions import ActorDiedError, RayError

from cancel.background import spawn_detached
from cancel.scope import CancelScope
from cancel.ticket import ScopeTicket
from cancel.timeouts import Backoff

logger = logging.getLogger(__name__)


class SessionScope(CancelScope):
    """A ``CancelScope`` whose cancels are also published to the session's ``ScopeHost``.

    Every change of the generation takes a new ``version``, so a version names exactly one
    state and the host can apply publishes in order.

    Recovery: the host holds only what the writer published. If a publish fails because the
    host is restarting or unreachable, it is retried with backoff; when the directory's watch
    of the host reports a restart (``resync``), the current state is published again, so the
    new incarnation knows the session exactly as before. Only a host that is dead for good
    (``ActorDiedError``: Ray will not restart it) ends publishing; ``flush`` then raises. The
    writer's own filter stays exact either way.
    """

    def __init__(
        self,
        session_id: str,
        host: ActorHandle,
        on_close: Callable[["SessionScope"], Awaitable[None]],
    ) -> None:
        super().__init__()
        self._session_id = session_id
        self._host = host
        self._on_close = on_close
        self._version = 0
        self._published = 0
        """Version the host is known to hold; -1 when it may hold nothing (restarted)."""
        self._resyncs = 0
        self._closed = False
        self._publisher: asyncio.Task[None] | None = None

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def host(self) -> ActorHandle:
        return self._host

    @property
    def version(self) -> int:
        """Number of state changes so far (what orders publishes on the host)."""
        return self._version

    def cancel(self) -> int:
        """Cancel locally at once (the ingress's filter is exact now); publish in the background."""
        generation = super().cancel()
        self._version += 1
        self._publish_soon()
        return generation

    def ticket(self, generation: int | None = None) -> ScopeTicket:
        """A ticket for a request working on ``generation`` (default: the current one)."""
        current = self.generation
        return ScopeTicket(
            self._session_id,
            self._host,
            self._version,
            current if generation is None else generation,
            current,
        )

    def resync(self) -> None:
        """The host may have restarted and lost the session: publish the state again."""
        self._published = -1
        self._resyncs += 1
        self._publish_soon()

    async def flush(self) -> None:
        """Wait until every change so far is published (raises if the host is gone for good)."""
        if self._publisher is not None and not self._closed:
            await asyncio.shield(self._publisher)

    async def close(self) -> None:
        """Release the session on its host; the host's watchers see it gone. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._publisher is not None:
            self._publisher.cancel()
        await self._on_close(self)

    def _publish_soon(self) -> None:
        if self._closed or (self._publisher is not None and not self._publisher.done()):
            return
        self._publisher = spawn_detached(self._publish())
        self._publisher.add_done_callback(_log_failure)

    async def _publish(self) -> None:
        """Publish the latest state until the host has it; one task at a time keeps order."""
        backoff = Backoff()
        while self._published != self._version:
            version, resyncs = self._version, self._resyncs
            try:
                await self._host.publish.remote(self._session_id, version, self.generation)
            except ActorDiedError:
                raise
            except RayError as error:  # restarting or unreachable: try again, gently
                if not backoff.failing:
                    logger.warning("scope publish to %s failed (%r); retrying", self._host, error)
                await asyncio.sleep(backoff.delay())
                continue
            if resyncs == self._resyncs:  # else it may have reached the incarnation that died
                self._published = version
            backoff.reset()


def _log_failure(task: "asyncio.Task[None]") -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("scope publish failed: %r", task.exception())

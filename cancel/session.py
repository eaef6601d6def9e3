"""SessionScope: the writer's (ingress's) view of one session's scope.

The ingress is the only writer. It keeps a local ``CancelScope`` mirror so that every
operation on its hot path is synchronous and exact at once; a cancel is then published to
the session's host in the background, in order, for workers in other processes to see.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from ray.actor import ActorHandle
from ray.exceptions import ActorDiedError, RayActorError

from cancel.scope import CancelScope
from cancel.tokens import ScopeTicket, make_token

logger = logging.getLogger(__name__)


class SessionScope(CancelScope):
    """A ``CancelScope`` whose cancels are also published to the session's ``ScopeHost``.

    Every change of the token (a cancel, or a new host epoch) takes a new ``version``, so a
    version names exactly one state and the host can apply publishes in order.

    Recovery: if a publish finds the host restarted (the call fails with ``RayActorError``, or
    the host no longer knows the session), or the directory's watch of the host reports a
    restart (``resync``), the scope re-opens the session on the new incarnation, adopts its
    epoch and republishes under a higher version. Tickets issued before carry the old epoch,
    so work started under them stays stale; tickets issued after are fresh again. Only a host
    that is dead for good (``ActorDiedError``: Ray will not restart it) ends publishing;
    ``flush`` then raises.
    """

    def __init__(
        self,
        session_id: str,
        host: ActorHandle,
        epoch: int,
        on_close: Callable[["SessionScope"], Awaitable[None]],
    ) -> None:
        super().__init__()
        self._session_id = session_id
        self._host = host
        self._epoch = epoch
        self._on_close = on_close
        self._version = 0
        self._published = 0
        self._needs_open = False
        self._closed = False
        self._publisher: asyncio.Task[None] | None = None

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def host(self) -> ActorHandle:
        return self._host

    @property
    def epoch(self) -> int:
        """Epoch of the host incarnation this scope's tokens belong to."""
        return self._epoch

    @property
    def version(self) -> int:
        """Number of state changes so far (what orders publishes on the host)."""
        return self._version

    @property
    def token(self) -> int:
        """The current generation as workers compare it."""
        return make_token(self._epoch, self.generation)

    def cancel(self) -> int:
        """Cancel locally at once (the ingress's filter is exact now); publish in the background."""
        generation = super().cancel()
        self._changed()
        return generation

    def ticket(self, gen: int | None = None) -> ScopeTicket:
        """A ticket for a request working on ``gen`` (default: the current generation)."""
        token = self.token if gen is None else make_token(self._epoch, gen)
        return ScopeTicket(self._session_id, self._host, self._version, token, self.token)

    def resync(self) -> None:
        """The host may have restarted: re-open the session there and republish."""
        self._needs_open = True
        self._changed()

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

    def _changed(self) -> None:
        self._version += 1
        if self._closed or (self._publisher is not None and not self._publisher.done()):
            return
        self._publisher = asyncio.get_running_loop().create_task(self._publish())
        self._publisher.add_done_callback(_log_failure)

    async def _publish(self) -> None:
        """Publish the latest state until the host has it; one task at a time keeps order."""
        while self._published < self._version:
            try:
                if self._needs_open:
                    self._needs_open = False
                    self._adopt(await self._host.open.remote(self._session_id))
                version = self._version
                stored = await self._host.publish.remote(self._session_id, version, self.token)
            except ActorDiedError:
                raise
            except RayActorError:
                stored = False
            if stored:
                self._published = version
            else:
                self.resync()

    def _adopt(self, epoch: int) -> None:
        """Take the epoch of the incarnation the session was (re)opened on."""
        if epoch != self._epoch:
            self._epoch = epoch
            self._version += 1


def _log_failure(task: "asyncio.Task[None]") -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("scope publish failed: %r", task.exception())

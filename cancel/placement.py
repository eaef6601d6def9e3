"""ScopeDirectory: where session scopes live, seen from the ingress (the writer side).

Two placements behind one interface. ``shared`` (default): a fixed pool of async
``ScopeHost`` actors holds every session's scope, sharded by a stable hash of the session id;
cost per session is a dict entry, not a process. ``dedicated``: one host actor per session,
created on open and killed on close; isolation at the price of a whole Ray worker process
(~50 MB, 0.25-0.5 s to start) per session.

Host actors are not detached and have no name: they are owned by the ingress process that
created them (they die with it, as its sessions do) and nobody can look them up. Session ids
come from ``secrets.token_urlsafe``, so they are unguessable too.
"""

import asyncio
import contextlib
import logging
import secrets
import zlib
from functools import partial
from typing import Literal, cast

import ray
from pydantic import BaseModel, ConfigDict, Field
from ray.actor import ActorHandle
from ray.exceptions import ActorDiedError, RayActorError, RayError

from cancel.background import spawn_detached
from cancel.host import NO_EPOCH, ScopeHost
from cancel.session import SessionScope
from cancel.timeouts import Backoff, spread

logger = logging.getLogger(__name__)

HOST_MAX_CONCURRENCY = 10_000
"""Every worker process keeps a long-poll pending on each host it watches sessions of."""
WATCH_EPOCH_S = 30.0
SESSION_ID_BYTES = 16
OPEN_SESSION_TIMEOUT_S = 10.0
"""How long a new session waits for some shared host to answer before it fails, visibly."""


class ScopePlacementConfig(BaseModel):
    """Where session scopes live."""

    model_config = ConfigDict(frozen=True)

    mode: Literal["shared", "dedicated"] = "shared"
    num_hosts: int = Field(default=2, ge=1, description="Host actors of the shared pool.")
    label_selector: dict[str, str] | None = Field(
        default=None, description="Ray node labels a host actor needs (none: any node)."
    )


def _start_host(label_selector: dict[str, str] | None) -> ActorHandle:
    """A host actor that Ray restarts forever and that never holds a CPU back from scheduling."""
    placement = {} if label_selector is None else {"label_selector": label_selector}
    options = ray.remote(ScopeHost).options(
        num_cpus=0, max_restarts=-1, max_concurrency=HOST_MAX_CONCURRENCY, **placement
    )
    return cast(ActorHandle, options.remote())


class _HostLink:
    """One host actor, the sessions placed on it, and the watch that notices it restart.

    A restarted host knows no session until its writer publishes it again; the watch sees the
    new incarnation and has every session of the host republished at once, so that workers
    can vouch for it again.
    """

    def __init__(self, host: ActorHandle) -> None:
        self.host = host
        self.scopes: set[SessionScope] = set()
        self._watch = spawn_detached(self._watch_restarts())

    async def _watch_restarts(self) -> None:
        backoff = Backoff()
        epoch = NO_EPOCH
        while True:
            try:
                current = await self.host.watch_epoch.remote(epoch, spread(WATCH_EPOCH_S))
            except ActorDiedError:
                logger.warning("scope host %s is gone for good", self.host)
                return
            except RayError:  # restarting or unreachable: the next answer tells which epoch
                await asyncio.sleep(backoff.delay())
                continue
            backoff.reset()
            if epoch not in (NO_EPOCH, current):
                logger.warning("scope host %s restarted; republishing its sessions", self.host)
                for scope in self.scopes:
                    scope.resync()
            epoch = current

    def stop(self) -> None:
        """Stop watching and kill the host."""
        self._watch.cancel()
        ray.kill(self.host)


class ScopeDirectory:
    """Opens session scopes on host actors placed as the config says; owns those actors."""

    def __init__(self, config: ScopePlacementConfig, shared: list[_HostLink]) -> None:
        self._config = config
        self._shared = shared
        self._links: set[_HostLink] = set(shared)

    @classmethod
    async def create(cls, config: ScopePlacementConfig | None = None) -> "ScopeDirectory":
        """A directory whose shared hosts (if any) are started and ready for sessions."""
        config = config or ScopePlacementConfig()
        shared = []
        if config.mode == "shared":
            shared = [_HostLink(_start_host(config.label_selector)) for _ in range(config.num_hosts)]
            await asyncio.gather(*(link.host.stats.remote() for link in shared))
        return cls(config, shared)

    @property
    def config(self) -> ScopePlacementConfig:
        return self._config

    @property
    def hosts(self) -> list[ActorHandle]:
        """The host actors this directory owns now (the shared pool, or one per open session)."""
        return [link.host for link in self._links]

    @property
    def open_sessions(self) -> int:
        """Scopes opened and not yet closed (for health reporting and leak checks)."""
        return sum(len(link.scopes) for link in self._links)

    async def open_session(self) -> SessionScope:
        """Open a new session's scope: one host call when shared, an actor start when dedicated.

        Run it off the first response's critical path (e.g. as a task when the connection opens).
        """
        session_id = secrets.token_urlsafe(SESSION_ID_BYTES)
        if self._shared:
            link = await self._place_shared(session_id)
        else:
            link = _HostLink(_start_host(self._config.label_selector))
            self._links.add(link)
            try:
                await link.host.publish.remote(session_id, 0, 0)
            except BaseException:
                self._release_link(link)
                raise
        scope = SessionScope(session_id, link.host, partial(self._close, link))
        link.scopes.add(scope)
        return scope

    async def _place_shared(self, session_id: str) -> _HostLink:
        """The shared host that takes the session: its hash's, else the next one that answers.

        A host restarting (its node lost: Ray starts it elsewhere, seconds) refuses calls
        meanwhile; a new session then goes to another host rather than failing. With none
        answering, the round is tried again with backoff for ``OPEN_SESSION_TIMEOUT_S``.
        Where a session lives is carried by its scope, not recomputed from the hash."""
        first = zlib.crc32(session_id.encode()) % len(self._shared)
        order = self._shared[first:] + self._shared[:first]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + OPEN_SESSION_TIMEOUT_S
        backoff = Backoff()
        while True:
            for link in order:
                try:
                    await link.host.publish.remote(session_id, 0, 0)
                except RayActorError as exc:
                    logger.warning("scope host %s unavailable for a new session: %r", link.host, exc)
                    failure = exc
                else:
                    return link
            delay = backoff.delay()
            if loop.time() + delay > deadline:
                raise failure
            await asyncio.sleep(delay)

    async def shutdown(self) -> None:
        """Close every open session and kill every host."""
        await asyncio.gather(*(scope.close() for link in self._links for scope in list(link.scopes)))
        for link in list(self._links):
            self._release_link(link)

    async def _close(self, link: _HostLink, scope: SessionScope) -> None:
        link.scopes.discard(scope)
        with contextlib.suppress(RayActorError):  # a dead host has lost the session anyway
            await link.host.close.remote(scope.session_id)
        if not self._shared:
            self._release_link(link)

    def _release_link(self, link: _HostLink) -> None:
        self._links.discard(link)
        link.stop()

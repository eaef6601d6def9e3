"""Worker side: a process-local, push-updated cache of session scopes.

A worker gets a ``ScopeTicket`` with each request and turns it into a ``ScopeView`` with
``ScopeCache.watch``; ``view.is_stale()`` is then an attribute comparison with no remote call.
Freshness comes by push: per host actor, one background long-poll
(``ScopeHost.wait_changes``) batched over every session this process watches there.

Failure semantics: if a host dies, restarts, stops answering, or no longer knows a session
(closed, or lost in a restart), every view of the sessions concerned turns stale for good
(their state is set to ``STALE_TOKEN``): workers stop their work instead of hanging on it.
A later ticket with a newer version (the writer re-opened the session) revives the session.

Use a cache only from its event loop's thread; ``is_stale`` may be read from any thread.
"""

import asyncio
import logging
import weakref
from typing import Any, ClassVar

import ray
from ray.actor import ActorHandle
from ray.exceptions import RayError

from cancel.timeouts import spread
from cancel.tokens import STALE_TOKEN, ScopeTicket

logger = logging.getLogger(__name__)

POLL_TIMEOUT_S = 30.0
"""Long-poll timeout; each answer is a full refresh, so this is also the refresh interval."""
POLL_GRACE_S = 10.0
"""How long past its timeout a poll may stay unanswered before its host counts as lost."""


class _Entry:
    """The newest state this process knows of one session, shared by all its views."""

    __slots__ = ("changed", "host", "refs", "session_id", "token", "version")

    def __init__(self, ticket: ScopeTicket) -> None:
        self.session_id = ticket.session_id
        self.host = ticket.host
        self.version = ticket.version
        self.token = ticket.state_token
        self.refs = 0
        self.changed = asyncio.Event()

    @property
    def live(self) -> bool:
        return self.token != STALE_TOKEN

    def update(self, version: int, token: int) -> bool:
        """Take a state if it is newer than the one known; True if it was."""
        if version <= self.version:
            return False
        self.version, self.token = version, token
        self.signal()
        return True

    def lose(self) -> None:
        """The state can no longer be vouched for: every view turns stale."""
        self.token = STALE_TOKEN
        self.signal()

    def signal(self) -> None:
        """Wake ``wait_stale`` callers (each re-checks its own view)."""
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


class _Released(_Entry):
    """What a released view points at: stale, shared by nobody."""

    __slots__ = ()

    def __init__(self) -> None:
        self.token = STALE_TOKEN


_RELEASED = _Released()


class ScopeView:
    """A worker's view of one session scope for one request (see ``ScopeCache.watch``)."""

    __slots__ = ("_cache", "_entry", "token")

    def __init__(self, cache: "ScopeCache", entry: _Entry, token: int) -> None:
        self.token = token
        self._entry = entry
        self._cache = cache

    def is_stale(self, token: int | None = None) -> bool:
        """True once ``token`` (default: the ticket's) is superseded; a local read."""
        if token is None:
            token = self.token
        return token != self._entry.token

    async def wait_stale(self) -> None:
        """Return once the view is stale: for async code that would rather wait than check."""
        while not self.is_stale():
            await self._entry.changed.wait()

    def release(self) -> None:
        """Stop watching (idempotent); a released view reports stale."""
        entry, self._entry = self._entry, _RELEASED
        if entry is not _RELEASED:
            self._cache._release(entry)

    def __enter__(self) -> "ScopeView":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class _HostPoll:
    """The one long-poll loop of this process for one host actor."""

    def __init__(self, cache: "ScopeCache", host: ActorHandle) -> None:
        self.host = host
        self.entries: dict[str, _Entry] = {}
        self._cache = cache
        self._wake = asyncio.Event()
        self._abandoned: set[asyncio.Future[Any]] = set()
        self._polling = False
        self.task = asyncio.get_running_loop().create_task(self._run())

    @property
    def outstanding(self) -> int:
        """Polls of this loop still pending on the host (the current one and cancelled ones)."""
        return int(self._polling) + len(self._abandoned)

    def add(self, entry: _Entry) -> None:
        """Include a (new or revived) session; the pending poll is replaced to include it."""
        self.entries[entry.session_id] = entry
        self._wake.set()

    def discard(self, entry: _Entry) -> None:
        if self.entries.pop(entry.session_id, None) is not None and not self._live():
            self._wake.set()

    def _live(self) -> dict[str, int]:
        return {sid: entry.version for sid, entry in self.entries.items() if entry.live}

    async def _run(self) -> None:
        try:
            while True:
                await asyncio.sleep(0)  # let code woken by the last answer run before re-polling
                self._wake.clear()
                known = self._live()
                if not known:
                    return
                timeout = spread(self._cache.poll_timeout_s)
                ref: ray.ObjectRef = self.host.wait_changes.remote(known, timeout)
                self._polling = True
                try:
                    await self._next(ref, timeout)
                finally:
                    self._polling = False
        finally:
            self._cache._poll_ended(self)
            await asyncio.gather(*self._abandoned, return_exceptions=True)

    async def _next(self, ref: ray.ObjectRef, timeout: float) -> None:
        """Apply the poll's answer, or abandon it when woken (sessions changed) or unanswered."""
        answer = asyncio.wrap_future(ref.future())
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait(
                (answer, woken),
                timeout=timeout + self._cache.poll_grace_s,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            woken.cancel()
        if answer.done():
            self._apply(answer)
            return
        ray.cancel(ref)
        self._abandoned.add(answer)
        answer.add_done_callback(self._forget)
        if not woken.done():
            logger.warning("scope host %s did not answer a poll in time", self.host)
            self._lose_all()

    def _forget(self, answer: "asyncio.Future[Any]") -> None:
        """An abandoned poll ended (typically ``TaskCancelledError``); its answer is moot."""
        self._abandoned.discard(answer)
        if not answer.cancelled():
            answer.exception()

    def _apply(self, answer: "asyncio.Future[dict[str, tuple[int, int] | None]]") -> None:
        try:
            changes = answer.result()
        except RayError as error:
            logger.warning("scope host %s lost: %s", self.host, type(error).__name__)
            self._lose_all()
            return
        for session_id, state in changes.items():
            entry = self.entries.get(session_id)
            if entry is None:
                continue
            if state is None:
                entry.lose()
            else:
                entry.update(*state)

    def _lose_all(self) -> None:
        for entry in self.entries.values():
            entry.lose()


class ScopeCache:
    """Per-process (per event loop) cache of the session scopes this worker watches."""

    _by_loop: ClassVar["weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ScopeCache]"] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(
        self, poll_timeout_s: float = POLL_TIMEOUT_S, poll_grace_s: float = POLL_GRACE_S
    ) -> None:
        self.poll_timeout_s = poll_timeout_s
        self.poll_grace_s = poll_grace_s
        self._entries: dict[str, _Entry] = {}
        self._polls: dict[ActorHandle, _HostPoll] = {}
        self._ending: set[_HostPoll] = set()

    @classmethod
    def for_current_loop(cls) -> "ScopeCache":
        """The cache of the running event loop (one per worker process in practice)."""
        loop = asyncio.get_running_loop()
        cache = cls._by_loop.get(loop)
        if cache is None:
            cache = cls._by_loop[loop] = cls()
        return cache

    def watch(self, ticket: ScopeTicket) -> ScopeView:
        """A view of the ticket's session, up to date with the writer as of the ticket.

        No remote call: the ticket already carries the writer's state. Release the view when
        the request ends (or use it as a context manager).
        """
        entry = self._entries.get(ticket.session_id)
        if entry is None:
            entry = self._entries[ticket.session_id] = _Entry(ticket)
            self._poll_for(entry).add(entry)
        elif entry.live:
            entry.update(ticket.version, ticket.state_token)
        elif entry.update(ticket.version, ticket.state_token):
            self._poll_for(entry).add(entry)  # revived: the writer re-opened the session
        entry.refs += 1
        return ScopeView(self, entry, ticket.token)

    def stats(self) -> dict[str, int]:
        """Counters for tests and benchmarks."""
        polls = [*self._polls.values(), *self._ending]
        return {
            "sessions": len(self._entries),
            "host_polls": len(self._polls),
            "outstanding_polls": sum(poll.outstanding for poll in polls),
        }

    async def idle(self) -> None:
        """Wait until every host poll has ended (they end once no view is left)."""
        while polls := [*self._polls.values(), *self._ending]:
            await asyncio.gather(*(poll.task for poll in polls), return_exceptions=True)

    def _poll_for(self, entry: _Entry) -> _HostPoll:
        poll = self._polls.get(entry.host)
        if poll is None:
            poll = self._polls[entry.host] = _HostPoll(self, entry.host)
        return poll

    def _release(self, entry: _Entry) -> None:
        entry.refs -= 1
        entry.signal()
        if entry.refs:
            return
        del self._entries[entry.session_id]
        poll = self._polls.get(entry.host)
        if poll is not None:
            poll.discard(entry)

    def _poll_ended(self, poll: _HostPoll) -> None:
        if self._polls.get(poll.host) is poll:
            del self._polls[poll.host]
        self._ending.add(poll)
        poll.task.add_done_callback(lambda _: self._ending.discard(poll))

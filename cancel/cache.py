"""Worker side: a process-local, push-updated cache of session scopes.

A worker gets a ``ScopeTicket`` with each request and turns it into a ``ScopeView`` with
``ScopeCache.watch``; ``view.is_stale()`` is then an attribute comparison with no remote call.
Freshness comes by push: per host actor, one background long-poll of the host's change log
(``ScopeHost.wait_changes``), shared by every request of this process and owned by none of
them (``cancel.background``), so a request that Serve cancels cannot take it down.

A view turns stale only when its own session's writer says so: a cancel of its generation,
or the session closed (closed by the writer, or its host killed for good, which only the
writer that owns it does, or the writer's own death causes). When the cache cannot vouch for
a session (its host restarting, slow or unreachable), views keep the last state they know
and the work goes on: the writer
(the ingress) cancels its streams and filters their output itself, so the cache is a fast
path for stopping work early, never the guard that keeps stale output from a client. The poll
is retried with backoff until the host answers again, and catches up on what it missed.

Use a cache only from its event loop's thread; ``is_stale`` may be read from any thread.
"""

import asyncio
import logging
import weakref
from typing import ClassVar

import ray
from ray.actor import ActorHandle
from ray.exceptions import ActorDiedError, RayError

from cancel.background import spawn_detached
from cancel.host import NO_EPOCH, Change
from cancel.ticket import ScopeTicket, SessionState
from cancel.timeouts import Backoff, spread

logger = logging.getLogger(__name__)

POLL_TIMEOUT_S = 30.0
"""Long-poll timeout: how long a host holds a poll when nothing changes."""
POLL_GRACE_S = 10.0
"""How long past its timeout a poll may stay unanswered before it is re-sent."""
LINGER_S = 30.0
"""How long a host's poll goes on once no request watches a session there: the next request
then finds it running and up to date instead of starting it and reading the whole log."""
CLOSED = -1
"""The generation of a closed session: no request works for it."""


class _Entry:
    """The newest state this process knows of one session, shared by all its views."""

    __slots__ = ("changed", "generation", "host", "refs", "session_id", "version")

    def __init__(self, ticket: ScopeTicket) -> None:
        self.session_id = ticket.session_id
        self.host = ticket.host
        self.version = ticket.version
        self.generation = ticket.current
        self.refs = 0
        self.changed = asyncio.Event()

    def update(self, version: int, generation: int) -> None:
        """Take a state if it is newer than the one known."""
        if version > self.version:
            self.version, self.generation = version, generation
            self.signal()

    def close(self) -> None:
        self.generation = CLOSED
        self.signal()

    def signal(self) -> None:
        """Wake ``wait_stale`` callers (each re-checks its own view)."""
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()


class _Released(_Entry):
    """What a released view points at: stale, shared by nobody."""

    __slots__ = ()

    def __init__(self) -> None:
        self.generation = CLOSED


_RELEASED = _Released()


class ScopeView:
    """A worker's view of one session scope for one request (see ``ScopeCache.watch``)."""

    __slots__ = ("_cache", "_entry", "generation")

    def __init__(self, cache: "ScopeCache", entry: _Entry, generation: int) -> None:
        self.generation = generation
        self._entry = entry
        self._cache = cache

    def is_stale(self, generation: int | None = None) -> bool:
        """True once ``generation`` (default: the ticket's) is superseded; a local read."""
        if generation is None:
            generation = self.generation
        return generation != self._entry.generation

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
    """This process's long-poll of one host's change log, and what it has read from it.

    ``states`` mirrors the latest state of every session of the host that the poll has read
    since it started (its first answer is the whole log): a session watched later may have
    changed before it was watched, after its ticket was issued.
    """

    def __init__(self, cache: "ScopeCache", host: ActorHandle) -> None:
        self.host = host
        self.entries: dict[str, _Entry] = {}
        self.states: dict[str, SessionState] = {}
        self._cache = cache
        self._epoch = NO_EPOCH
        self._since = 0
        self._linger: asyncio.TimerHandle | None = None
        self.task = spawn_detached(self._run())

    def add(self, entry: _Entry) -> None:
        self._stop_lingering()
        self.entries[entry.session_id] = entry
        state = self.states.get(entry.session_id)
        if state is not None:
            entry.update(*state)

    def discard(self, entry: _Entry) -> None:
        del self.entries[entry.session_id]
        if not self.entries:  # (any earlier linger was stopped by the add since)
            self._linger = asyncio.get_running_loop().call_later(self._cache.linger_s, self.stop_if_idle)

    def _stop_lingering(self) -> None:
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None

    def stop_if_idle(self) -> None:
        """End the poll if no view needs it; a later watch of the host starts a new one."""
        if not self.entries:
            self._cache._poll_ended(self)
            self.task.cancel()

    async def _run(self) -> None:
        backoff = Backoff()
        try:
            while True:
                timeout = spread(self._cache.poll_timeout_s)
                ref: ray.ObjectRef = self.host.wait_changes.remote(self._epoch, self._since, timeout)
                try:
                    answer = await asyncio.wait_for(
                        asyncio.wrap_future(ref.future()), timeout + self._cache.poll_grace_s
                    )
                except asyncio.CancelledError:
                    ray.cancel(ref)
                    raise
                except ActorDiedError:  # killed by its owner, the writer: its sessions are over
                    logger.info("scope host %s is gone for good; its sessions are closed", self.host)
                    for entry in self.entries.values():
                        entry.close()
                    return
                except (RayError, TimeoutError) as error:
                    # Restarting, unreachable, slow, or the call cancelled by someone else:
                    # none of it says anything about a session, so views stay as they are.
                    ray.cancel(ref)
                    if not backoff.failing:
                        logger.warning("scope host %s: poll failed (%r); retrying", self.host, error)
                    await asyncio.sleep(backoff.delay())
                    continue
                if backoff.failing:
                    logger.warning("scope host %s answers again", self.host)
                backoff.reset()
                self._apply(*answer)
        finally:
            self._cache._poll_ended(self)

    def _apply(self, epoch: int, seq: int, changes: list[Change]) -> None:
        if epoch != self._epoch:  # first answer, or the host restarted: a whole new log
            self._epoch = epoch
            self.states.clear()
        self._since = seq
        for session_id, state in changes:
            entry = self.entries.get(session_id)
            if state is None:
                self.states.pop(session_id, None)
                if entry is not None:
                    entry.close()
            else:
                self.states[session_id] = state
                if entry is not None:
                    entry.update(*state)


class ScopeCache:
    """Per-process (per event loop) cache of the session scopes this worker watches."""

    _by_loop: ClassVar["weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ScopeCache]"] = weakref.WeakKeyDictionary()

    def __init__(
        self,
        poll_timeout_s: float = POLL_TIMEOUT_S,
        poll_grace_s: float = POLL_GRACE_S,
        linger_s: float = LINGER_S,
    ) -> None:
        self.poll_timeout_s = poll_timeout_s
        self.poll_grace_s = poll_grace_s
        self.linger_s = linger_s
        self._entries: dict[str, _Entry] = {}
        self._polls: dict[ActorHandle, _HostPoll] = {}

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
            poll = self._polls.get(entry.host)
            if poll is None:
                poll = self._polls[entry.host] = _HostPoll(self, entry.host)
            poll.add(entry)
        else:
            entry.update(ticket.version, ticket.current)
        entry.refs += 1
        return ScopeView(self, entry, ticket.generation)

    def stats(self) -> dict[str, int]:
        """Counters for tests and benchmarks."""
        return {
            "sessions": len(self._entries),
            "host_polls": len(self._polls),
            "mirrored_states": sum(len(poll.states) for poll in self._polls.values()),
        }

    async def drain(self) -> None:
        """End every poll that no view needs now, without lingering, and wait until they end."""
        idle = [poll for poll in self._polls.values() if not poll.entries]
        for poll in idle:
            poll.stop_if_idle()
        await asyncio.gather(*(poll.task for poll in idle), return_exceptions=True)

    def _release(self, entry: _Entry) -> None:
        entry.refs -= 1
        entry.signal()
        if entry.refs:
            return
        del self._entries[entry.session_id]
        poll = self._polls.get(entry.host)
        if poll is not None and poll.entries.get(entry.session_id) is entry:
            poll.discard(entry)

    def _poll_ended(self, poll: _HostPoll) -> None:
        if self._polls.get(poll.host) is poll:
            del self._polls[poll.host]

"""A stand-in for an LLM/TTS replica: an actor in its own process that watches scope tickets."""

import asyncio
import time

import ray

from cancel import ScopeCache, ScopeHost, ScopeTicket, ScopeView
from cancel.host import Changes


@ray.remote(num_cpus=0)
class ScopeWorker:
    """Holds views by test-chosen keys, read through this process's ``ScopeCache``."""

    def __init__(self, **cache_options: float) -> None:
        """``cache_options`` (poll timeouts, linger) give the worker its own cache instead of
        the loop's."""
        self._views: dict[str, ScopeView] = {}
        self._own_cache = ScopeCache(**cache_options) if cache_options else None

    @property
    def cache(self) -> ScopeCache:
        return self._own_cache or ScopeCache.for_current_loop()

    async def watch(self, tickets: dict[str, ScopeTicket]) -> dict[str, bool]:
        """Watch each ticket under its key; return which views are stale right away."""
        for key, ticket in tickets.items():
            self._views[key] = self.cache.watch(ticket)
        return {key: self._views[key].is_stale() for key in tickets}

    async def stale(self) -> dict[str, bool]:
        return {key: view.is_stale() for key, view in self._views.items()}

    async def generate(self, key: str, step_s: float, max_s: float = float("inf")) -> int:
        """Produce "tokens" until the view turns stale (checked before each) or ``max_s``
        passes; return the count."""
        view = self._views[key]
        deadline = time.monotonic() + max_s
        steps = 0
        while not view.is_stale() and time.monotonic() < deadline:
            steps += 1
            await asyncio.sleep(step_s)  # the work of one token
        return steps

    async def observe(self, key: str) -> int:
        """Wait until the view turns stale; return when (``time.monotonic_ns``, system-wide)."""
        await self._views[key].wait_stale()
        return time.monotonic_ns()

    async def release(self, keys: list[str]) -> None:
        for key in keys:
            self._views.pop(key).release()

    async def release_all(self) -> dict[str, int]:
        """Release every view, end the idle host polls, and return the cache's counters."""
        for view in self._views.values():
            view.release()
        self._views.clear()
        await self.cache.drain()
        return self.cache.stats()

    async def cache_stats(self) -> dict[str, int]:
        return self.cache.stats()


@ray.remote(num_cpus=0)
class SilentHost(ScopeHost):
    """A host that is alive but never answers a poll (wedged, or cut off by the network)."""

    async def wait_changes(self, epoch: int, since: int, timeout_s: float) -> Changes:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

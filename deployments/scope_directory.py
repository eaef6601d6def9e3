"""The replica's cancel-scope directory: started by its first session, shared by all of them.

Creating it starts scope-host actors (seconds), so it starts with the first session and stays
off every later session's critical path. It runs detached (``spawn_detached``): shared by
every session, it is owned by none of their requests, which Serve's recursive cancel would
otherwise reach. A creation that failed is tried again by the next session, and fails the
replica's health check meanwhile.
"""

import asyncio

from cancel import ScopeDirectory, ScopePlacementConfig, spawn_detached


class SharedScopeDirectory:
    def __init__(self, config: ScopePlacementConfig) -> None:
        self._config = config
        self._creation: asyncio.Task[ScopeDirectory] | None = None

    async def get(self) -> ScopeDirectory:
        """The directory, once built (a failed creation is started again). Awaited through a
        shield: a session whose request is cancelled meanwhile must not cancel the creation
        every session shares (``Task.cancel`` cancels the task it awaits)."""
        if self._creation is None or self.failed():
            self._creation = spawn_detached(ScopeDirectory.create(self._config))
        return await asyncio.shield(self._creation)

    def failed(self) -> bool:
        creation = self._creation
        return creation is not None and creation.done() and (creation.cancelled() or creation.exception() is not None)

    def built(self) -> ScopeDirectory | None:
        """The directory if it is built, without starting it."""
        creation = self._creation
        return None if creation is None or not creation.done() or self.failed() else creation.result()

"""Supervision: every task of a session runs in one ``asyncio.TaskGroup``.

The session's loops (receive, send, VAD, turn-taking) and every task they start
(responses, transcriptions, timers) are children of one group: if any fails
unexpectedly the group cancels the rest and the session ends visibly (an ``error`` and
close code 1011), never a live socket with a dead loop.
"""

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]
"""Start a task under the session's supervision (its failure fails the session)."""


class Supervisor:
    def __init__(self, name: str) -> None:
        self._name = name
        self._tasks: asyncio.TaskGroup | None = None
        self.running = asyncio.Event()
        """Set while tasks may be spawned."""

    def spawn(self, coroutine: Coroutine[Any, Any, None]) -> "asyncio.Task[None]":
        if self._tasks is None:
            coroutine.close()
            raise RuntimeError(f"session {self._name} is not running")
        return self._tasks.create_task(coroutine)

    async def run(self, *loops: Coroutine[Any, Any, None]) -> None:
        """Run ``loops`` and everything spawned until one fails or all end (an
        ``ExceptionGroup`` says which failed)."""
        try:
            async with asyncio.TaskGroup() as tasks:
                self._tasks = tasks
                self.running.set()
                for loop in loops:
                    tasks.create_task(loop)
        finally:
            self._tasks = None
            self.running.clear()

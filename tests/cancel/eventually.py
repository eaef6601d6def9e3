"""Waiting for a condition that only another process can observe and that has no event."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(probe: Callable[[], Awaitable[T]], accept: Callable[[T], bool], timeout_s: float = 20.0) -> T:
    """Re-run ``probe`` until ``accept`` holds for its result; fail after ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        while not accept(result := await probe()):
            await asyncio.sleep(0.01)
    return result

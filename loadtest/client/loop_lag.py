"""How late a bench's own event loop ran.

The benches run their client on the server's cores. A client starved of CPU sends its
microphone frames late and timestamps the server's events late, and a latency figure charges
that to the server: the WebRTC bench's caller (aiortc) stalled up to 0.9 s at a time, and
one interruption read 3.9 s where the others read 0.3-0.5 s. So each figure comes with how
late the client's loop ran while it was being measured.
"""

import asyncio
import contextlib
import time
from types import TracebackType

TICK_S = 0.05
"""How often the loop is sampled: a stall shorter than this may go unseen."""


class LoopLag:
    """While entered (``async with``), wakes every ``tick_s`` and keeps how late it woke, at
    ``time.perf_counter`` times."""

    def __init__(self, tick_s: float = TICK_S) -> None:
        self._tick_s = tick_s
        self._samples: list[tuple[float, float]] = []
        """(when it woke, how late)."""
        self._sampling: asyncio.Task[None] | None = None

    async def __aenter__(self) -> "LoopLag":
        self._sampling = asyncio.ensure_future(self._sample())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._sampling is not None:
            self._sampling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampling

    async def _sample(self) -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(self._tick_s)
            woke = time.perf_counter()
            self._samples.append((woke, max(0.0, woke - before - self._tick_s)))

    def lags_s(self) -> list[float]:
        """Every sample's lateness, in order."""
        return [late for _, late in self._samples]

    def worst_ms(self, since: float, until: float) -> float:
        """The longest the loop ran late during ``since``-``until`` (``perf_counter`` times): a
        sample covers the sleep before it, so a stall that began in the window counts."""
        overlapping = (late for woke, late in self._samples if woke >= since and woke - late - self._tick_s <= until)
        return round(1000 * max(overlapping, default=0.0), 1)

"""Media streams that are open but not yet authenticated: a phone stream is accepted before
it can say who it is (its secret comes in its ``start`` message), so until then it counts
against a small cap of its own.

Over the cap, the oldest waiting stream is closed to make room. A real call's ``start``
follows its socket within a second, so a flood of silent sockets cannot keep a real call
out, nor hold the replica's requests (an open WebSocket holds one of the ingress's
``max_ongoing_requests``) for longer than it takes the next ones to arrive; none waits past
``START_TIMEOUT_S``. The closings are logged as one line per interval, never one per socket.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

logger = logging.getLogger(__name__)

LOG_INTERVAL_S = 10.0

T = TypeVar("T")


class MadeRoom(Exception):
    """This stream waited longest when a newer one needed its place."""


class PendingStreams:
    def __init__(self, cap: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._cap = cap
        self._waiting: dict[object, asyncio.Event] = {}
        """Streams waiting, oldest first, each with what tells it to make room."""
        self._clock = clock
        self._made_room = 0
        self._logged_at = -LOG_INTERVAL_S

    def __len__(self) -> int:
        return len(self._waiting)

    async def first(self, opening: Awaitable[T]) -> T:
        """``opening``'s result, unless the stream must make room first (``MadeRoom``)."""
        me, evicted = object(), asyncio.Event()
        self._waiting[me] = evicted
        if len(self._waiting) > self._cap:
            self._waiting.pop(next(iter(self._waiting))).set()
        reading = asyncio.ensure_future(opening)
        evicting = asyncio.ensure_future(evicted.wait())
        try:
            await asyncio.wait((reading, evicting), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._waiting.pop(me, None)
            evicting.cancel()
            if not reading.done():
                reading.cancel()
        if not reading.done() or reading.cancelled():
            self._count_made_room()
            raise MadeRoom
        return reading.result()

    def _count_made_room(self) -> None:
        self._made_room += 1
        now = self._clock()
        if now - self._logged_at >= LOG_INTERVAL_S:
            logger.warning(
                "%d media streams closed without a 'start' to make room (over ingress.twilio.pending_streams=%d)",
                self._made_room,
                self._cap,
            )
            self._made_room, self._logged_at = 0, now

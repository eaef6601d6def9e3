"""Media streams that are open but not yet authenticated: a phone stream is accepted before
it can say who it is (its secret comes in its ``start`` message), so until then it counts
against a small cap of its own.

Over the cap, the oldest waiting stream is closed to make room, and while streams are
being closed so (``CROWDED_S`` after the last), none may wait more than
``CROWDED_WAIT_S``. A real call's ``start`` follows its socket within milliseconds, so a
flood of silent sockets keeps no real call out, and holds the replica's requests (an open
WebSocket holds one of the ingress's ``max_ongoing_requests``) only briefly; without a
flood a stream waits up to the transport's own ``START_TIMEOUT_S``. The closings are
logged as one line per interval, never one per socket.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

logger = logging.getLogger(__name__)

LOG_INTERVAL_S = 10.0
CROWDED_S = 2.0
CROWDED_WAIT_S = 1.0

T = TypeVar("T")


class MadeRoom(Exception):
    """This stream had to go: it waited longest when a newer one needed its place, or too
    long while streams were crowding in."""


class PendingStreams:
    def __init__(self, cap: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._cap = cap
        self._waiting: dict[object, asyncio.Event] = {}
        """Streams waiting, oldest first, each with what tells it to make room."""
        self._clock = clock
        self._crowded_until = -CROWDED_S
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
            self._crowded_until = self._clock() + CROWDED_S
        reading = asyncio.ensure_future(opening)
        evicting = asyncio.ensure_future(evicted.wait())
        try:
            while not (reading.done() or evicting.done()):
                await asyncio.wait((reading, evicting), timeout=CROWDED_WAIT_S, return_when=asyncio.FIRST_COMPLETED)
                if not reading.done() and self._clock() < self._crowded_until:
                    break
        finally:
            self._waiting.pop(me, None)
            evicting.cancel()
            if not reading.done():
                reading.cancel()
        if reading.cancelled():
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

"""A cheap client's wire: what lets one process drive hundreds of sessions.

- a received message goes to its handler in the turn of the event loop that read it (no
  queue, no reader task woken per message);
- frames go out on a shared grid of ticks: one timer per tick wakes every session whose
  frame is due;
- an audio delta's size is read from its base64 length, not decoded.
"""

import asyncio
import base64
import math
import time
from collections.abc import Callable
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.frames import DATA_OPCODES, Frame, Opcode
from websockets.protocol import Event

TICK_S = 0.01
"""A frame goes out at its deadline rounded up to this grid (at most 10 ms late, never
drifting): the timers of many sessions then fire in one turn of the event loop."""

_BASE64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def _is_base64(text: str) -> bool:
    """Only base64's characters (padding included): no quote, backslash or control character."""
    return text.isascii() and not text.encode("ascii").translate(None, _BASE64)


def audio_size(delta: str) -> int:
    """Bytes of audio in a base64 ``delta``, exactly ``len(base64.b64decode(delta))``: counted
    from its length when it is plain padded base64 (as a server sends it), decoded otherwise."""
    size = len(delta)
    padding = size - len(delta.rstrip("="))
    if size % 4 == 0 and padding <= 2 and _is_base64(delta) and "=" not in delta[: size - padding]:
        return size // 4 * 3 - padding
    return len(base64.b64decode(delta))


class Metronome:
    """The wake-ups of every session in one event loop, on a ``TICK_S`` grid of the loop's
    clock: one timer per tick for all the frames due in it, not one per frame."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._due: dict[int, list[asyncio.Future[None]]] = {}

    async def until(self, deadline: float) -> None:
        """Sleep until ``deadline`` (``time.monotonic()``) rounded up to the grid; if that is
        past, only yield to the other tasks."""
        now = self.loop.time()
        tick = math.ceil((deadline - time.monotonic() + now) / TICK_S)
        if tick * TICK_S <= now:
            await asyncio.sleep(0)
            return
        waiters = self._due.get(tick)
        if waiters is None:
            waiters = self._due[tick] = []
            self.loop.call_at(tick * TICK_S, self._fire, tick)
        waiter = self.loop.create_future()
        waiters.append(waiter)
        await waiter  # a cancelled sleeper cancels its own waiter, no one else's

    def _fire(self, tick: int) -> None:
        for waiter in self._due.pop(tick):
            if not waiter.done():
                waiter.set_result(None)


_metronome: Metronome | None = None


def running_metronome() -> Metronome:
    """The metronome of the running loop (one at a time: a new loop gets a new one)."""
    global _metronome
    loop = asyncio.get_running_loop()
    if _metronome is None or _metronome.loop is not loop:
        _metronome = Metronome(loop)
    return _metronome


class DeliveringConnection(ClientConnection):
    """websockets' client connection, handing each message to a handler as soon as it is
    parsed, in the turn of the event loop that read it, instead of queueing it for a reader
    task to wake up for. (Pings, pongs, the close and the handshake are websockets' own.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handler: Callable[[bytes, bool], None] | None = None
        self._early: list[tuple[bytes, bool]] = []
        """Messages read with the handshake's response, before :meth:`deliver_to`."""
        self._fragments: list[bytes] = []
        self._text = False

    def deliver_to(self, handler: Callable[[bytes, bool], None]) -> None:
        """From now on, call ``handler(data, is_text)`` with each message (and now with those
        that came before)."""
        self._handler = handler
        early, self._early = self._early, []
        for data, text in early:
            handler(data, text)

    def process_event(self, event: Event) -> None:
        if self.response is None or not isinstance(event, Frame) or event.opcode not in DATA_OPCODES:
            super().process_event(event)
            return
        if event.opcode is not Opcode.CONT:
            self._fragments.clear()
            self._text = event.opcode is Opcode.TEXT
        if not event.fin:  # a fragment: the message is whole with its last one
            self._fragments.append(bytes(event.data))
            return
        data = b"".join([*self._fragments, event.data]) if self._fragments else bytes(event.data)
        self._fragments.clear()
        if self._handler is None:
            self._early.append((data, self._text))
        else:
            self._handler(data, self._text)

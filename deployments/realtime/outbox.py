"""The session's outgoing events: one ordered queue, the discard rule, held speculative output.

What is dropped is decided here, by event type, and nowhere else. A response's *output*
(its audio and transcript deltas: the stream content, pipecat's data frames) is dropped
once that response is cancelled, whether it is still queued or comes later. Every other
event is *control* (lifecycle, errors, VAD and conversation events: pipecat's system
frames) and always goes out, in order. Output is tagged with its response's id, so
cancelling response B never drops anything of an earlier response A.

Putting never blocks, so no task can hang on a full queue after a cancel (review D1); a
producer of output awaits :meth:`Outbox.room` before adding more, which bounds the queue
and slows only this session's response when its client reads slowly.

A speculative response (started in the pause before the turn is known to have ended) is
*held*: its events are kept back until it is released, in order, or dropped unseen.
"""

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from openai import BaseModel as OpenAIModel
from openai.types.realtime import ResponseAudioDeltaEvent, ResponseAudioTranscriptDeltaEvent

from deployments.realtime.protocol import encode

RESPONSE_OUTPUT: tuple[type[OpenAIModel], ...] = (ResponseAudioDeltaEvent, ResponseAudioTranscriptDeltaEvent)
"""The event types that are a response's output; all others are control."""


def is_output(event: OpenAIModel) -> bool:
    return isinstance(event, RESPONSE_OUTPUT)


class Outbox:
    def __init__(
        self,
        send_text: Callable[[str], Awaitable[None]],
        capacity: int,
        on_sent: Callable[[OpenAIModel], None] = lambda event: None,
        on_dropped: Callable[[OpenAIModel], None] = lambda event: None,
    ) -> None:
        self._send_text = send_text
        self._capacity = capacity
        self._on_sent = on_sent
        self._on_dropped = on_dropped
        self._queue: deque[tuple[str | None, OpenAIModel]] = deque()
        self._queued = asyncio.Event()
        self._room = asyncio.Event()
        self._held: dict[str, list[OpenAIModel]] = {}
        self._cancelled: set[str] = set()

    def put(self, event: OpenAIModel, response_id: str | None = None) -> None:
        """Queue ``event`` (of response ``response_id``, if any); never blocks."""
        if response_id is not None:
            if response_id in self._cancelled and is_output(event):
                self._on_dropped(event)
                return
            if response_id in self._held:
                self._held[response_id].append(event)
                return
        self._queue.append((response_id, event))
        self._queued.set()

    async def room(self, response_id: str) -> None:
        """Wait until the queue (or the response's held events) has room for more output."""
        while len(self._held.get(response_id, self._queue)) >= self._capacity:
            self._room.clear()
            await self._room.wait()

    def hold(self, response_id: str) -> None:
        """Keep back every event of ``response_id`` until :meth:`release` or :meth:`cancel`."""
        self._held[response_id] = []

    def release(self, response_id: str) -> None:
        """The held response is shown: its events go out in order, later ones directly."""
        for event in self._held.pop(response_id, []):
            self.put(event, response_id)
        self._room.set()

    def cancel(self, response_id: str) -> None:
        """Drop the response's queued and future output (held events: all of them)."""
        self._room.set()
        if self._held.pop(response_id, None) is not None:
            return
        self._cancelled.add(response_id)
        kept: deque[tuple[str | None, OpenAIModel]] = deque()
        for entry in self._queue:
            if entry[0] == response_id and is_output(entry[1]):
                self._on_dropped(entry[1])
            else:
                kept.append(entry)
        self._queue = kept

    def forget(self, response_id: str) -> None:
        """The response's task has ended: nothing more of it can come, and the ids of
        cancelled responses need not be kept (held events wait for release or cancel)."""
        self._cancelled.discard(response_id)

    async def run(self) -> None:
        """The send loop: events leave in the order they were queued."""
        while True:
            while not self._queue:
                self._queued.clear()
                await self._queued.wait()
            _, event = self._queue.popleft()
            self._room.set()
            await self._send_text(encode(event))
            self._on_sent(event)

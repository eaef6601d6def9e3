"""The session's outgoing events: one ordered queue, the discard rule, held speculative output.

What is dropped is decided here, by event type, and nowhere else: every server event type
of the protocol is declared either *output* (``DROPPED_ON_CANCEL``: a response's streamed
content, its ``*.delta`` events, pipecat's data frames) or *control* (``KEPT_ON_CANCEL``:
lifecycle, errors, VAD and conversation events, pipecat's system frames). Output is dropped
once its response is cancelled, whether it is still queued or comes later; control always
goes out, in order. Output is tagged with its response's id, so cancelling response B never
drops anything of an earlier response A.

What was *sent* is reported per event (``put``'s ``on_sent``), so a response counts the
audio and text the client got, not what was queued: a cancel keeps exactly those words.

Putting never blocks, so no task can hang on a full queue after a cancel; a
producer of output awaits :meth:`Outbox.room` before adding more, which bounds the queue
and slows only this session's response when its client reads slowly.

A speculative response (started in the pause before the turn is known to have ended) is
*held*: its events are kept back until it is released, in order, or dropped unseen. A
response dropped unseen stays unseen: every event of it that comes later (its tasks stop at
their next step, and one may still be sending) is dropped too, control included, since the
client never saw it created.

The answer's audio is queued here as :class:`AnswerAudio` frames, in order with the rest, and
the send loop hands each to the transport's :class:`AudioOut` port (a ``CLEAR_AUDIO`` to its
``clear``); every other event goes to the transport's ``send``.
"""

import asyncio
from collections import deque
from collections.abc import Callable
from typing import get_args

from openai import BaseModel as OpenAIModel
from openai.types import realtime as events
from openai.types.realtime import realtime_server_event as more_events

from deployments.realtime.transports.audio_out import AnswerAudio, AudioOut, ClearAudio
from deployments.realtime.transports.port import SendEvent

SERVER_EVENT_TYPES: frozenset[type] = frozenset(get_args(get_args(events.RealtimeServerEvent)[0]))
"""Every server event type of the protocol, from the SDK's union."""

_OUTPUT: tuple[type, ...] = (
    AnswerAudio,
    events.ResponseAudioDeltaEvent,
    events.ResponseAudioTranscriptDeltaEvent,
    events.ResponseTextDeltaEvent,
    events.ResponseFunctionCallArgumentsDeltaEvent,
    events.ResponseMcpCallArgumentsDelta,
)
DROPPED_ON_CANCEL: frozenset[type] = frozenset(_OUTPUT)
"""A response's streamed content (its ``*.delta`` events): a cancelled response's are never
sent, and what it reports (``response.done``, the item's text) is what was sent before."""

KEPT_ON_CANCEL: frozenset[type] = frozenset[type](
    {
        events.ConversationCreatedEvent,
        events.ConversationItemCreatedEvent,
        events.ConversationItemAdded,
        events.ConversationItemDone,
        events.ConversationItemDeletedEvent,
        events.ConversationItemTruncatedEvent,
        more_events.ConversationItemRetrieved,
        events.ConversationItemInputAudioTranscriptionDeltaEvent,
        events.ConversationItemInputAudioTranscriptionCompletedEvent,
        events.ConversationItemInputAudioTranscriptionFailedEvent,
        events.ConversationItemInputAudioTranscriptionSegment,
        events.RealtimeErrorEvent,
        events.InputAudioBufferClearedEvent,
        events.InputAudioBufferCommittedEvent,
        events.InputAudioBufferDtmfEventReceivedEvent,
        events.InputAudioBufferSpeechStartedEvent,
        events.InputAudioBufferSpeechStoppedEvent,
        events.InputAudioBufferTimeoutTriggered,
        more_events.OutputAudioBufferStarted,
        more_events.OutputAudioBufferStopped,
        more_events.OutputAudioBufferCleared,
        events.RateLimitsUpdatedEvent,
        events.SessionCreatedEvent,
        events.SessionUpdatedEvent,
        events.ResponseCreatedEvent,
        events.ResponseDoneEvent,
        events.ResponseOutputItemAddedEvent,
        events.ResponseOutputItemDoneEvent,
        events.ResponseContentPartAddedEvent,
        events.ResponseContentPartDoneEvent,
        events.ResponseAudioDoneEvent,
        events.ResponseAudioTranscriptDoneEvent,
        events.ResponseTextDoneEvent,
        events.ResponseFunctionCallArgumentsDoneEvent,
        events.ResponseMcpCallArgumentsDone,
        events.ResponseMcpCallInProgress,
        events.ResponseMcpCallCompleted,
        events.ResponseMcpCallFailed,
        events.McpListToolsInProgress,
        events.McpListToolsCompleted,
        events.McpListToolsFailed,
    }
)
"""Control: always sent, in order. The user's transcript deltas are the user's words, not
the response's, and a cancelled response still ends (``*.done``, ``response.done``)."""

Sent = Callable[[], None]
Outgoing = OpenAIModel | AnswerAudio | ClearAudio
_Entry = tuple[str | None, Outgoing, Sent | None]


def is_output(event: Outgoing) -> bool:
    return type(event) in DROPPED_ON_CANCEL


class Outbox:
    def __init__(
        self,
        send: SendEvent,
        audio: AudioOut,
        capacity: int,
        on_sent: Callable[[Outgoing], None] = lambda event: None,
        on_dropped: Callable[[Outgoing], None] = lambda event: None,
    ) -> None:
        self._send = send
        self._audio = audio
        self._capacity = capacity
        self._on_sent = on_sent
        self._on_dropped = on_dropped
        self._queue: deque[_Entry] = deque()
        self._queued = asyncio.Event()
        self._room = asyncio.Event()
        self._held: dict[str, list[_Entry]] = {}
        self._cancelled: set[str] = set()
        """Responses the client saw that were cancelled: their output is dropped."""
        self._unseen: set[str] = set()
        """Held responses dropped unseen: all their events are dropped."""

    def put(self, event: Outgoing, response_id: str | None = None, on_sent: Sent | None = None) -> None:
        """Queue ``event`` (of response ``response_id``, if any); never blocks. ``on_sent``
        is called once the event has gone to the socket (never, if it is dropped)."""
        if response_id is not None:
            if response_id in self._unseen:
                return
            if response_id in self._cancelled and is_output(event):
                self._on_dropped(event)
                return
            if response_id in self._held:
                self._held[response_id].append((response_id, event, on_sent))
                return
        self._queue.append((response_id, event, on_sent))
        self._queued.set()

    async def room(self, response_id: str) -> None:
        """Wait until the queue (or the response's held events) has room for more output."""
        while len(self._held.get(response_id, self._queue)) >= self._capacity:
            self._room.clear()
            await self._room.wait()

    def hold(self, response_id: str) -> None:
        """Keep back every event of ``response_id`` until :meth:`release` or :meth:`cancel`."""
        self._held[response_id] = []

    def holds(self, response_id: str) -> bool:
        """Whether ``response_id`` is held: the client has seen nothing of it."""
        return response_id in self._held

    def release(self, response_id: str) -> None:
        """The held response is shown: its events go out in order, later ones directly."""
        for _, event, on_sent in self._held.pop(response_id, []):
            self.put(event, response_id, on_sent)
        self._room.set()

    def cancel(self, response_id: str) -> None:
        """Drop the response's queued and future output (held: all its events, now and later)."""
        self._room.set()
        if self._held.pop(response_id, None) is not None:
            self._unseen.add(response_id)
            return
        self._cancelled.add(response_id)
        kept: deque[_Entry] = deque()
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
        self._unseen.discard(response_id)

    async def run(self) -> None:
        """The send loop: events leave in the order they were queued."""
        while True:
            while not self._queue:
                self._queued.clear()
                await self._queued.wait()
            _, event, on_sent = self._queue.popleft()
            self._room.set()
            if on_sent is not None:  # on its way: no cancel can stop it reaching the client now
                on_sent()
            if isinstance(event, AnswerAudio):
                await self._audio.play(event)
            elif isinstance(event, ClearAudio):
                await self._audio.clear()
            else:
                await self._send(event)
            self._on_sent(event)

"""The client's ``conversation.item.*`` events: create, retrieve, delete and truncate.

Each checks its input in our words (a :class:`ProtocolError` the session turns into an
``error`` event), changes the conversation, and says so on the outbox in the order the
protocol gives. A user audio item is transcribed like a spoken turn (``Transcription``), so
its events come as a turn's do. A resumed session's items are announced again (:func:`replay`).
"""

from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemCreateEvent,
    ConversationItemDeletedEvent,
    ConversationItemDeleteEvent,
    ConversationItemDone,
    ConversationItemRetrieveEvent,
    ConversationItemTruncatedEvent,
    ConversationItemTruncateEvent,
)
from openai.types.realtime.realtime_server_event import ConversationItemRetrieved

from deployments.realtime.conversation import Conversation
from deployments.realtime.input_events import client_audio, is_user_audio
from deployments.realtime.items import Item, from_client
from deployments.realtime.kit import SessionKit
from deployments.realtime.outbox import Outbox
from deployments.realtime.protocol import ProtocolError, new_id, server_event
from deployments.realtime.session_config import SessionConfig
from deployments.realtime.turn_taking.transcription import Transcription


class ItemEvents:
    def __init__(self, kit: SessionKit, transcription: Transcription, config: SessionConfig) -> None:
        """``config``: the bounds on an item's text and audio."""
        self._kit, self._transcription = kit, transcription
        self._max_item_chars, self._max_input_audio_s = config.max_item_chars, config.max_input_audio_s

    async def create(self, event: ConversationItemCreateEvent) -> None:
        item = event.item
        if item.id is not None and self._kit.conversation.find(item.id) is not None:
            raise ProtocolError("invalid_value", f"the conversation already has an item {item.id[:64]!r}", "item.id")
        if is_user_audio(item):
            utterance = client_audio(item, self._kit.settings.input_audio, self._max_input_audio_s, "item")
            try:
                self._transcription.add(utterance, item.id or new_id("item"), event.previous_item_id)
            except KeyError:
                raise unknown_item(event.previous_item_id, "previous_item_id") from None
            return
        added = from_client(item, self._max_item_chars, "item")
        previous = self._add(added, event.previous_item_id)
        self._kit.outbox.put(server_event(ConversationItemAdded, item=added.wire(), previous_item_id=previous))
        self._kit.outbox.put(server_event(ConversationItemDone, item=added.wire(), previous_item_id=previous))

    def _add(self, item: Item, after: str | None) -> str | None:
        try:
            return self._kit.conversation.add(item, after)
        except KeyError:
            raise unknown_item(after, "previous_item_id") from None

    async def retrieve(self, event: ConversationItemRetrieveEvent) -> None:
        item = self._kit.conversation.find(event.item_id)
        if item is None:
            raise unknown_item(event.item_id, "item_id")
        self._kit.outbox.put(server_event(ConversationItemRetrieved, item=item.wire()))

    async def delete(self, event: ConversationItemDeleteEvent) -> None:
        if not self._kit.conversation.delete(event.item_id):
            raise unknown_item(event.item_id, "item_id")
        self._kit.outbox.put(server_event(ConversationItemDeletedEvent, item_id=event.item_id))

    async def truncate(self, event: ConversationItemTruncateEvent) -> None:
        audio_end_ms = self._kit.conversation.truncate(event.item_id, event.content_index, event.audio_end_ms)
        self._kit.playback.stopped()  # the client stopped playing where it says
        self._kit.outbox.put(
            server_event(
                ConversationItemTruncatedEvent, item_id=event.item_id, content_index=0, audio_end_ms=audio_end_ms
            )
        )


def unknown_item(item_id: str | None, param: str) -> ProtocolError:
    return ProtocolError("item_not_found", f"no item {str(item_id)[:64]!r} in the conversation", param)


def replay(conversation: Conversation, outbox: Outbox) -> None:
    """A resumed session shows its client the conversation it holds, as it was built:
    each item ``conversation.item.added`` then ``conversation.item.done``, in order."""
    previous = None
    for item in conversation.items:
        outbox.put(server_event(ConversationItemAdded, item=item.wire(), previous_item_id=previous))
        outbox.put(server_event(ConversationItemDone, item=item.wire(), previous_item_id=previous))
        previous = item.id

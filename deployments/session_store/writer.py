"""Keeps a session's stored record current, from what its client was sent.

The record changes when the client is told it did: settings (``session.updated``), an item
finished (``conversation.item.done``), deleted or truncated. Each such event, once sent,
asks for one write of the whole state; writes are coalesced (one in flight, and changes
made meanwhile make one more), so a burst of events costs one or two writes, and a lost
replica loses at most what changed in the last write's round trip.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from openai.types.realtime import (
    ConversationItemDeletedEvent,
    ConversationItemDone,
    ConversationItemTruncatedEvent,
    SessionUpdatedEvent,
)

from cancel import spawn_detached
from deployments.realtime.conversation import Conversation
from deployments.realtime.settings import SessionSettings
from deployments.session_store.record import SessionState, item_record

logger = logging.getLogger(__name__)

FLUSH_TIMEOUT_S = 2.0
"""The store answers in milliseconds; a resume's own wait is of this order (redis_records)."""

Save = Callable[[SessionState], Awaitable[bool]]
"""Writes the state; ``False`` if the record now belongs to a newer connection."""


class SessionRecordWriter:
    def __init__(
        self,
        settings: SessionSettings,
        conversation: Conversation,
        save: Save,
        on_superseded: Callable[[], None],
    ) -> None:
        self._settings = settings
        self._conversation = conversation
        self._save = save
        self._on_superseded = on_superseded
        self._finished = {item.id for item in conversation.items}
        """Items the client was told are finished (a resumed session's are all finished)."""
        self._dirty = False
        self._writer: asyncio.Task[None] | None = None

    def sent(self, event: Any) -> None:
        """The client was sent ``event``: write the state again if it changed it."""
        if isinstance(event, ConversationItemDone):
            self._finished.add(event.item.id or "")
        elif isinstance(event, ConversationItemDeletedEvent):
            self._finished.discard(event.item_id)
        elif not isinstance(event, SessionUpdatedEvent | ConversationItemTruncatedEvent):
            return
        self.rewrite()

    def rewrite(self) -> None:
        """Write the whole state again (soon: coalesced with the write in flight)."""
        self._dirty = True
        if self._writer is None or self._writer.done():
            self._writer = spawn_detached(self._write())

    async def flushed(self, timeout_s: float = FLUSH_TIMEOUT_S) -> None:
        """Until every change the client was told of is in the store, or ``timeout_s`` has
        passed (a store that does not answer holds the session no longer)."""
        writer = self._writer
        if writer is not None and not writer.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(writer), timeout_s)  # the write itself goes on

    def state(self) -> SessionState:
        items = [item for item in self._conversation.items if item.id in self._finished]
        self._finished.intersection_update(item.id for item in items)  # forgotten items go
        settings = self._settings.describe().model_dump(mode="json", exclude_none=True)
        return {"settings": settings, "items": [item_record(item) for item in items]}

    async def _write(self) -> None:
        while self._dirty:
            self._dirty = False
            try:
                kept = await self._save(self.state())
            except Exception:  # the next change writes the whole state again
                logger.warning("could not store the session's record", exc_info=True)
                return
            if not kept:
                self._on_superseded()
                return


@dataclass(frozen=True)
class StoredSession:
    """A session whose record is kept in a store: its id, the token that resumes it, how
    its state is written, and (resumed) the state it had."""

    session_id: str
    resume_token: str
    save: Save
    rewrite_with: Callable[[Callable[[], None]], None]
    """Registers what writes the whole state again, called when the store lost the record."""
    resumed: SessionState | None = None


EMPTY_STATE: SessionState = {"settings": {}, "items": []}
"""A new session's record: the server's settings and no items."""

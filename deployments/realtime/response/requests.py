"""The client's ``response.create`` and ``response.cancel``: an answer asked for (with the
session's settings or its own, over the conversation or a context of its own), or stopped."""

from openai.types.realtime import ResponseCancelEvent, ResponseCreateEvent

from deployments.realtime.conversation import prompt
from deployments.realtime.items import from_client
from deployments.realtime.kit import SessionKit
from deployments.realtime.protocol import ProtocolError
from deployments.realtime.response.responder import Responder
from deployments.realtime.timeline import Timeline


class ResponseRequests:
    def __init__(self, kit: SessionKit, responder: Responder, max_item_chars: int) -> None:
        self._kit, self._responder, self._max_item_chars = kit, responder, max_item_chars

    async def create(self, event: ResponseCreateEvent) -> None:
        if self._responder.current is not None:
            raise ProtocolError("conversation_already_has_active_response", "a response is already in progress")
        asked = event.response
        options = self._kit.settings.response_options(asked)
        items = self._kit.conversation.items
        if asked is not None and asked.input is not None:  # a context of its own for this answer
            items = tuple(
                from_client(item, self._max_item_chars, f"response.input[{i}]") for i, item in enumerate(asked.input)
            )
        self._kit.metrics.turn_ended()
        timeline = Timeline()
        timeline.mark("requested")
        self._responder.answer(prompt(items, options.instructions), timeline, options)

    async def cancel(self, event: ResponseCancelEvent) -> None:
        if not self._responder.cancel("client_cancelled"):
            raise ProtocolError("response_cancel_not_active", "there is no response in progress to cancel")

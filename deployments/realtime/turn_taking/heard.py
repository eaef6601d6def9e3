"""What the caller heard of the answer a barge-in cut, where the transport knows it.

A WebSocket client says how much it played (``conversation.item.truncate``); a Twilio call
cannot, but the echoes of its marks say it (``AudioOut.played_ms``). There the server cuts
the answer itself, as far as it was heard, and tells of it as a truncate does
(``conversation.item.truncated``): the next prompt holds only the words the caller heard,
also when the answer had been sent whole and was still playing.
"""

import math

from openai.types.realtime import ConversationItemTruncatedEvent

from deployments.realtime.kit import SessionKit
from deployments.realtime.protocol import ProtocolError, server_event
from deployments.realtime.response.responder import Responder
from deployments.realtime.response.run import ResponseRun


class HeardAnswers:
    def __init__(self, kit: SessionKit, responder: Responder) -> None:
        self._kit = kit
        self._last: ResponseRun | None = None
        responder.on_end(self._ended)

    def _ended(self, run: ResponseRun) -> None:
        if run.answer.spoken_aloud and run.options.in_conversation:
            self._last = run

    def cut(self) -> None:
        """The caller stopped hearing the last answer (after its cancel, if it was running)."""
        run, self._last = self._last, None
        played_ms = self._kit.playback.played_ms(run.id) if run is not None else None
        if run is None or played_ms is None or played_ms >= run.answer.audio_ms:
            return
        try:
            cut_ms = self._kit.conversation.truncate(run.answer.id, 0, math.floor(played_ms))
        except ProtocolError:
            return  # the client deleted it meanwhile
        truncated = server_event(
            ConversationItemTruncatedEvent, item_id=run.answer.id, content_index=0, audio_end_ms=cut_ms
        )
        self._kit.outbox.put(truncated)

"""User audio items: added to the conversation at once, transcribed as speech.

Committed speech, a client's ``input_audio`` item and the silence of an idle timeout all
become a :class:`UserAudio` item here, with the same events in the same order:
``committed`` (for the input buffer), ``conversation.item.added``, then the transcript
(its deltas, ``completed`` or ``failed``) and ``conversation.item.done``.
"""

import asyncio
import logging
from collections.abc import Callable

import numpy as np
from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDone,
    ConversationItemInputAudioTranscriptionCompletedEvent,
    ConversationItemInputAudioTranscriptionDeltaEvent,
    ConversationItemInputAudioTranscriptionFailedEvent,
    InputAudioBufferCommittedEvent,
)

from deployments.realtime.failures import StageFailure
from deployments.realtime.items import UserAudio
from deployments.realtime.kit import SessionKit
from deployments.realtime.protocol import server_event
from deployments.realtime.stages import Stages
from deployments.realtime.timeline import Timeline
from deployments.realtime.turn_trace import NO_STAGE
from handlers.audio import SPEECH_RATE

logger = logging.getLogger(__name__)


class Transcription:
    def __init__(self, kit: SessionKit, partial_text: Callable[[str], str]) -> None:
        """``partial_text``: takes what partial transcripts sent of an item (``""``: none)."""
        self._kit, self._partial_text = kit, partial_text

    def commit(self, utterance: np.ndarray, item_id: str, transcript: "asyncio.Future[str] | None" = None) -> None:
        """The input buffer's speech becomes an item; ``transcript``: an STT call already
        under way (the speculation's)."""
        self._add(utterance, item_id, None, transcript, committed=True)

    def add(self, utterance: np.ndarray, item_id: str, after: str | None) -> None:
        """A client's ``input_audio`` item, after the item ``after`` names (``None``: at the
        end; an unknown one is a ``KeyError``)."""
        self._add(utterance, item_id, after, None, committed=False)

    def commit_silence(self, item_id: str) -> None:
        """An idle timeout: the silence is an empty utterance, with nothing to transcribe."""
        item = UserAudio(item_id)
        item.heard("")
        previous = self._kit.conversation.add(item)
        self._kit.outbox.put(server_event(InputAudioBufferCommittedEvent, item_id=item_id, previous_item_id=previous))
        for event in (ConversationItemAdded, ConversationItemDone):
            self._kit.outbox.put(server_event(event, item=item.wire(), previous_item_id=previous))

    def _add(
        self,
        utterance: np.ndarray,
        item_id: str,
        after: str | None,
        transcript: "asyncio.Future[str] | None",
        committed: bool,
    ) -> None:
        transcript = transcript or stt_future(self._kit.stages, utterance)  # first: it may raise
        item = UserAudio(item_id)
        try:
            previous = self._kit.conversation.add(item, after)
        except KeyError:
            transcript.cancel()
            raise
        if committed:
            self._kit.outbox.put(
                server_event(InputAudioBufferCommittedEvent, item_id=item_id, previous_item_id=previous)
            )
        self._kit.outbox.put(server_event(ConversationItemAdded, item=item.wire(), previous_item_id=previous))
        self._kit.spawn(self._transcribe(item, transcript, len(utterance) / SPEECH_RATE, previous))

    async def _transcribe(
        self, item: UserAudio, transcript: "asyncio.Future[str]", seconds: float, previous: str | None
    ) -> None:
        ids = {"item_id": item.id, "content_index": 0}
        sent = self._partial_text(item.id)
        try:
            text = await transcript
        except asyncio.CancelledError:
            item.not_heard()  # nobody waits forever on this item
            raise
        except Exception as exc:
            logger.warning("transcription of %s failed: %r", item.id, exc)
            item.not_heard()
            code, message = (exc.code, exc.message) if isinstance(exc, StageFailure) else ("stt_failed", "failed")
            error = {"type": "server_error", "code": code, "message": f"the audio was not transcribed: {message}"}
            self._kit.outbox.put(server_event(ConversationItemInputAudioTranscriptionFailedEvent, error=error, **ids))
            return
        item.heard(text)
        if text.startswith(sent) and len(text) > len(sent):  # the rest of it
            self._kit.outbox.put(
                server_event(ConversationItemInputAudioTranscriptionDeltaEvent, delta=text[len(sent) :], **ids)
            )
        self._kit.outbox.put(
            server_event(
                ConversationItemInputAudioTranscriptionCompletedEvent,
                transcript=text,
                usage={"type": "duration", "seconds": round(seconds, 3)},
                **ids,
            )
        )
        self._kit.outbox.put(server_event(ConversationItemDone, item=item.wire(), previous_item_id=previous))


def stt_future(stages: Stages, audio: np.ndarray, timeline: Timeline | None = None) -> "asyncio.Future[str]":
    """``audio``'s STT call as a future that may be awaited twice (by the item and the
    speculation); cancelling the future cancels the call on its replica. With a
    ``timeline``, the call is a stage of its turn (marked ``transcribed``, traced)."""
    stage = timeline.stage("stt") if timeline is not None else NO_STAGE
    call = stages.transcribe(audio, trace=stage.carrier)
    transcript: asyncio.Future[str] = asyncio.ensure_future(call)

    def done(future: "asyncio.Future[str]") -> None:
        if future.cancelled():
            call.cancel()
        elif future.exception() is None and timeline is not None:
            timeline.mark("transcribed")
            stage.end()

    transcript.add_done_callback(done)
    return transcript

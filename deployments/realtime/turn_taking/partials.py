"""Partial transcripts: the words of the utterance as it grows, before its turn ends.

Every ``interval_s`` while the user speaks, the utterance so far is transcribed and any
new whole words go out as ``conversation.item.input_audio_transcription.delta``. Deltas
only ever extend what was sent (a delta cannot take words back); the final transcript
sends the rest (``transcription``) and ``completed`` always carries it whole. At most one
call is in flight, and none in a pause (the speculation transcribes then).
"""

import asyncio
import logging
from collections.abc import Callable

import numpy as np
from openai.types.realtime import ConversationItemInputAudioTranscriptionDeltaEvent

from deployments.realtime.failures import StageFailure
from deployments.realtime.kit import SessionKit
from deployments.realtime.protocol import server_event
from handlers.audio import SPEECH_RATE

logger = logging.getLogger(__name__)

MIN_PARTIAL_S = 0.5
"""Less speech than this has no words worth a partial transcript."""


class PartialTranscripts:
    def __init__(
        self,
        kit: SessionKit,
        interval_s: float | None,
        speech_so_far: Callable[[], np.ndarray],
        paused: Callable[[], bool],
    ) -> None:
        """``interval_s``: ``None`` sends none; ``paused``: whether the user is in a pause."""
        self._kit, self._interval_s, self._speech_so_far, self._paused = kit, interval_s, speech_so_far, paused
        self._task: asyncio.Task[None] | None = None
        self._sent: dict[str, str] = {}
        """What each utterance's partial transcripts have sent, by item id."""

    def start(self, item_id: str) -> None:
        """The user started speaking the utterance ``item_id``."""
        self.stop()
        if self._interval_s is not None:
            self._task = self._kit.spawn(self._run(item_id, self._interval_s))

    def stop(self) -> None:
        """No more partials for the current utterance (it ended or the input restarted)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    def take(self, item_id: str) -> str:
        """What was sent of ``item_id`` (``""``: nothing), forgotten here."""
        return self._sent.pop(item_id, "")

    async def _run(self, item_id: str, interval_s: float) -> None:
        sent = self._sent.setdefault(item_id, "")
        while True:
            await asyncio.sleep(interval_s)  # the interval itself, not a synchronisation
            audio = self._speech_so_far()
            if self._paused() or len(audio) < SPEECH_RATE * MIN_PARTIAL_S:
                continue
            try:
                text = await self._kit.stages.transcribe(audio)
            except StageFailure as exc:  # only a preview: the final transcript reports failures
                logger.info("partial transcript of %s failed: %s", item_id, exc.message)
                continue
            words = text[: text.rstrip().rfind(" ") + 1]
            if words.startswith(sent) and len(words) > len(sent):
                delta = words[len(sent) :]
                self._kit.outbox.put(
                    server_event(
                        ConversationItemInputAudioTranscriptionDeltaEvent, item_id=item_id, content_index=0, delta=delta
                    )
                )
                sent = self._sent[item_id] = words

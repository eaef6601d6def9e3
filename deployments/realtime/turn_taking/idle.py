"""The idle timeout of server VAD (``idle_timeout_ms``): silence after an answer prompts one.

When an answer has played and the user says nothing for ``idle_timeout_ms``, the server
acts as OpenAI's does on a phone line: ``input_audio_buffer.timeout_triggered``, the
silence committed as an empty user audio item, and a response to it.
"""

import asyncio
from collections.abc import Callable

from openai.types.realtime import InputAudioBufferTimeoutTriggered

from deployments.realtime.conversation import prompt
from deployments.realtime.kit import SessionKit
from deployments.realtime.protocol import new_id, server_event
from deployments.realtime.response.responder import Responder
from deployments.realtime.response.run import ResponseRun
from deployments.realtime.timeline import Timeline
from deployments.realtime.turn_taking.transcription import Transcription


class IdleTimeout:
    def __init__(
        self,
        kit: SessionKit,
        responder: Responder,
        transcription: Transcription,
        received_ms: Callable[[], int],
        user_speaking: Callable[[], bool],
    ) -> None:
        """``received_ms``: the input audio's clock (``audio_*_ms``)."""
        self._kit, self._responder, self._transcription = kit, responder, transcription
        self._received_ms, self._user_speaking = received_ms, user_speaking
        self._timer: asyncio.Task[None] | None = None
        responder.on_end(self._answer_ended)

    def stop(self) -> None:
        """The user spoke (or the input restarted): no timeout until the next answer ends."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _answer_ended(self, run: ResponseRun) -> None:
        """The timeout counts from when the answer's audio has played."""
        self.stop()
        timeout_ms = self._kit.settings.idle_timeout_ms
        if timeout_ms is not None and self._kit.settings.turn_detection is not None:
            self._timer = self._kit.spawn(self._after(run.answer.spoken_ms / 1000 + timeout_ms / 1000))

    async def _after(self, seconds: float) -> None:
        start_ms = self._received_ms()
        await asyncio.sleep(seconds)  # the timeout itself
        self._timer = None
        if self._responder.current is not None or self._user_speaking():
            return
        item_id = new_id("item")
        self._kit.outbox.put(
            server_event(
                InputAudioBufferTimeoutTriggered,
                audio_start_ms=start_ms,
                audio_end_ms=self._received_ms(),
                item_id=item_id,
            )
        )
        self._transcription.commit_silence(item_id)
        timeline = Timeline()
        timeline.mark("requested")
        self._responder.answer(prompt(self._kit.conversation.items, self._kit.settings.instructions), timeline)

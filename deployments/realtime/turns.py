"""Turn-taking: what the VAD's boundaries mean for the conversation and the response.

Runs in its own task, fed by :meth:`AudioInput.next_event`, and never waits on a stage: a
barge-in is acted on the moment its ``SpeechStarted`` arrives, even while a transcription
is under way (review D6).

Speculation: in the pause that may end the user's turn (``SpeechPaused``) the utterance is
transcribed and, when a response would follow, answered in a *held* run. If the pause
becomes the end of the turn the transcript is reused and the held run adopted; if speech
resumes, both are dropped unseen.
"""

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDone,
    ConversationItemInputAudioTranscriptionCompletedEvent,
    ConversationItemInputAudioTranscriptionDeltaEvent,
    ConversationItemInputAudioTranscriptionFailedEvent,
    InputAudioBufferCommittedEvent,
    InputAudioBufferSpeechStartedEvent,
    InputAudioBufferSpeechStoppedEvent,
    InputAudioBufferTimeoutTriggered,
)

from deployments.metrics import SessionMetrics
from deployments.realtime.audio_input import AudioInput, TurnEvent
from deployments.realtime.conversation import Conversation, Item, prompt, wire_item
from deployments.realtime.outbox import Outbox
from deployments.realtime.protocol import new_id, server_event
from deployments.realtime.response import Responder, ResponseRun, Spawn
from deployments.realtime.settings import SessionSettings
from deployments.realtime.stages import StageCall, StageFailure, Stages
from deployments.realtime.timeline import Timeline
from handlers.audio import SPEECH_RATE
from handlers.llm import ChatMessage
from handlers.vad import SpeechPaused, SpeechResumed, SpeechStarted, SpeechStopped

logger = logging.getLogger(__name__)

MIN_PARTIAL_S = 0.5
"""Less speech than this has no words worth a partial transcript."""


@dataclass
class Speculation:
    end_sample: int
    transcript: "asyncio.Future[str]"
    timeline: Timeline
    run: ResponseRun | None = None


class TurnTaker:
    def __init__(
        self,
        audio: AudioInput,
        stages: Stages,
        conversation: Conversation,
        responder: Responder,
        outbox: Outbox,
        settings: SessionSettings,
        metrics: SessionMetrics,
        spawn: Spawn,
        prefill: bool = True,
        partial_transcript_interval_s: float | None = None,
    ) -> None:
        self._audio = audio
        self._prefill = prefill
        self._partial_interval_s = partial_transcript_interval_s
        self._partials: asyncio.Task[None] | None = None
        self._partial_text: dict[str, str] = {}
        """What each utterance's partial transcripts have sent, by item id."""
        self._stages = stages
        self._conversation = conversation
        self._responder = responder
        self._outbox = outbox
        self._settings = settings
        self._metrics = metrics
        self._spawn = spawn
        self._speech_item_id: str | None = None
        self._speculation: Speculation | None = None
        self._idle_timer: asyncio.Task[None] | None = None
        responder.ended = self._time_silence

    async def run(self) -> None:
        while True:
            self.on_event(await self._audio.next_event())

    def on_event(self, event: TurnEvent) -> None:
        vad = event.vad
        if isinstance(vad, SpeechStarted):
            self._stop_idle_timer()
            self._speech_item_id = new_id("item")
            self._outbox.put(
                server_event(
                    InputAudioBufferSpeechStartedEvent, audio_start_ms=vad.audio_start_ms, item_id=self._speech_item_id
                )
            )
            if self._settings.interrupt_response:
                self._responder.cancel("turn_detected")
            if self._prefill and self._settings.create_response:
                self._spawn(self._prefill_conversation())
            if self._partial_interval_s is not None:
                self._stop_partials()
                self._partials = self._spawn(self._partial_transcripts(self._speech_item_id, self._partial_interval_s))
        elif isinstance(vad, SpeechPaused):
            assert event.audio is not None
            self._speculate(vad, event.audio, event.lag_s)
        elif isinstance(vad, SpeechResumed):
            self.drop_speculation()
        else:
            assert event.audio is not None
            self._end_turn(vad, event.audio, event.lag_s)

    async def _prefill_conversation(self) -> None:
        """The conversation so far is how the answer to this turn's prompt will start."""
        try:
            messages = await prompt(self._conversation.items, self._settings.instructions)
            await self._stages.prefill(messages)
        except Exception as exc:  # only a head start: the answer computes it anyway
            logger.warning("LLM prefill failed: %r", exc)

    async def _partial_transcripts(self, item_id: str, interval_s: float) -> None:
        """The words of the growing utterance, as ``delta`` events, every ``interval_s``.

        Only whole words go out (the last may be cut), and only while each transcript
        extends what was sent: a delta cannot take words back. ``completed`` always carries
        the whole final transcript. At most one call is in flight, and none in a pause.
        """
        sent = self._partial_text.setdefault(item_id, "")
        while True:
            await asyncio.sleep(interval_s)  # the interval itself, not a synchronisation
            audio = self._audio.speech_so_far()
            if self._speculation is not None or len(audio) < SPEECH_RATE * MIN_PARTIAL_S:
                continue
            try:
                text = await _transcript(self._stages.transcribe(audio))
            except StageFailure as exc:  # only a preview: the final transcript reports failures
                logger.info("partial transcript of %s failed: %s", item_id, exc.message)
                continue
            words = text[: text.rstrip().rfind(" ") + 1]
            if words.startswith(sent) and len(words) > len(sent):
                self._outbox.put(
                    server_event(
                        ConversationItemInputAudioTranscriptionDeltaEvent,
                        item_id=item_id,
                        content_index=0,
                        delta=words[len(sent) :],
                    )
                )
                sent = self._partial_text[item_id] = words

    def _stop_partials(self) -> None:
        partials, self._partials = self._partials, None
        if partials is not None:
            partials.cancel()

    def reset(self) -> None:
        """The input restarted (cleared, reconfigured or committed by hand)."""
        self.drop_speculation()
        self._stop_partials()
        self._partial_text.pop(self._speech_item_id or "", None)
        self._speech_item_id = None
        self._stop_idle_timer()

    def _time_silence(self, run: ResponseRun) -> None:
        """An answer ended: with ``idle_timeout_ms`` (server VAD), that long a silence after
        its audio has played prompts a response, as OpenAI's server does on a phone line."""
        self._stop_idle_timer()
        timeout_ms = self._settings.idle_timeout_ms
        if timeout_ms is not None and self._settings.turn_detection is not None:
            played_s = run.item.audio_ms / 1000
            self._idle_timer = self._spawn(self._idle_after(played_s + timeout_ms / 1000))

    def _stop_idle_timer(self) -> None:
        timer, self._idle_timer = self._idle_timer, None
        if timer is not None:
            timer.cancel()

    async def _idle_after(self, seconds: float) -> None:
        """The timeout itself; the silence ends up in the conversation as an empty user audio
        item (``input_audio_buffer.timeout_triggered``, ``committed``) and is answered."""
        start_ms = self._audio.received_ms
        await asyncio.sleep(seconds)
        self._idle_timer = None
        if self._responder.current is not None or self._speech_item_id is not None:
            return
        item_id = new_id("item")
        ids = {"audio_start_ms": start_ms, "audio_end_ms": self._audio.received_ms, "item_id": item_id}
        self._outbox.put(server_event(InputAudioBufferTimeoutTriggered, **ids))
        silence = Item(item_id, "user", transcribed=asyncio.get_running_loop().create_future())
        silence.transcribed.set_result(None)  # type: ignore[union-attr]
        previous = self._conversation.add(silence)
        self._outbox.put(server_event(InputAudioBufferCommittedEvent, item_id=item_id, previous_item_id=previous))
        for added in (ConversationItemAdded, ConversationItemDone):
            self._outbox.put(server_event(added, item=wire_item(silence), previous_item_id=previous))
        timeline = Timeline()
        timeline.mark("requested")
        self._responder.start(prompt(self._conversation.items, self._settings.instructions), timeline)

    def drop_speculation(self) -> None:
        speculation, self._speculation = self._speculation, None
        if speculation is not None:
            self._discard(speculation)

    def _discard(self, speculation: Speculation) -> None:
        speculation.transcript.cancel()
        if speculation.run is not None:
            self._responder.abandon(speculation.run)

    def commit(self, utterance: np.ndarray, item_id: str, transcript: "asyncio.Future[str] | None" = None) -> None:
        """Add the user's audio item; ``transcript`` is an STT call already under way."""
        self.add_audio_item(utterance, item_id, None, transcript, committed=True)

    def add_audio_item(
        self,
        utterance: np.ndarray,
        item_id: str,
        after: str | None,
        transcript: "asyncio.Future[str] | None" = None,
        committed: bool = False,
    ) -> None:
        """Add a user audio item (committed speech, or ``input_audio`` a client created) after
        the item ``after`` names (``None``: at the end) and transcribe it as speech."""
        transcript = transcript or _transcript(self._stages.transcribe(utterance))  # first: it may raise
        item = Item(item_id, "user", transcribed=asyncio.get_running_loop().create_future())
        try:
            previous = self._conversation.add(item, after)
        except KeyError:
            transcript.cancel()
            raise
        if committed:
            self._outbox.put(server_event(InputAudioBufferCommittedEvent, item_id=item_id, previous_item_id=previous))
        self._outbox.put(server_event(ConversationItemAdded, item=wire_item(item), previous_item_id=previous))
        self._spawn(self._transcribe(item, transcript, len(utterance) / SPEECH_RATE, previous))

    def _speculate(self, vad: SpeechPaused, audio: np.ndarray, lag_s: float | None) -> None:
        self.drop_speculation()
        timeline = Timeline()
        timeline.mark("speech_paused")
        timeline.vad_lag_ms = None if lag_s is None else round(lag_s * 1000, 1)
        transcript = _transcript(self._stages.transcribe(audio), timeline)
        speculation = self._speculation = Speculation(vad.sample, transcript, timeline)
        if self._settings.create_response and self._responder.current is None:
            history = self._conversation.items  # the conversation this turn would extend
            speculation.run = self._responder.start(
                _speculative_prompt(history, self._settings.instructions, transcript),
                timeline,
                held=True,
                previous_item_id=self._speech_item_id,
            )

    def _end_turn(self, vad: SpeechStopped, utterance: np.ndarray, lag_s: float | None) -> None:
        item_id = self._speech_item_id or new_id("item")
        self._speech_item_id = None
        self._stop_partials()
        speculation, self._speculation = self._speculation, None
        stopped = server_event(InputAudioBufferSpeechStoppedEvent, audio_end_ms=vad.audio_end_ms, item_id=item_id)
        self._outbox.put(stopped)
        if speculation is not None and (vad.too_short or speculation.end_sample != vad.end_sample):
            self._discard(speculation)  # nothing to answer, or it heard other audio
            speculation = None
        if vad.too_short:
            self._partial_text.pop(item_id, None)
            return
        self._metrics.turn_ended()
        if speculation is None:
            timeline = Timeline()
            if lag_s is not None:
                timeline.vad_lag_ms = round(lag_s * 1000 - self._settings_silence_ms(), 1)
            transcript = _transcript(self._stages.transcribe(utterance), timeline)
        else:
            timeline, transcript = speculation.timeline, speculation.transcript
        timeline.mark("speech_stopped")
        self.commit(utterance, item_id, transcript)
        run = speculation.run if speculation is not None else None
        if not self._settings.create_response or self._responder.current is not None:
            if run is not None:
                self._responder.abandon(run)
            return
        current = prompt(self._conversation.items, self._settings.instructions)
        if run is not None:
            self._responder.adopt(run, current)
        else:
            self._responder.start(current, timeline)

    def _settings_silence_ms(self) -> int:
        turn = self._settings.turn_detection or self._settings.defaults
        return turn.silence_duration_ms

    async def _transcribe(
        self, item: Item, transcript: "asyncio.Future[str]", seconds: float, previous: str | None
    ) -> None:
        assert item.transcribed is not None
        try:
            item.text = await transcript
        except Exception as exc:
            logger.warning("transcription of %s failed: %r", item.id, exc)
            item.transcription_failed = True
            code, message = (exc.code, exc.message) if isinstance(exc, StageFailure) else ("stt_failed", "failed")
            error = {"type": "server_error", "code": code, "message": f"the audio was not transcribed: {message}"}
            self._outbox.put(
                server_event(
                    ConversationItemInputAudioTranscriptionFailedEvent, item_id=item.id, content_index=0, error=error
                )
            )
            return
        finally:
            item.transcribed.set_result(None)
        ids = {"item_id": item.id, "content_index": 0}
        sent = self._partial_text.pop(item.id, "")
        if item.text.startswith(sent) and len(item.text) > len(sent):  # the rest of it
            rest = item.text[len(sent) :]
            self._outbox.put(server_event(ConversationItemInputAudioTranscriptionDeltaEvent, delta=rest, **ids))
        self._outbox.put(
            server_event(
                ConversationItemInputAudioTranscriptionCompletedEvent,
                transcript=item.text,
                usage={"type": "duration", "seconds": round(seconds, 3)},
                **ids,
            )
        )
        self._outbox.put(server_event(ConversationItemDone, item=wire_item(item), previous_item_id=previous))


def _transcript(call: StageCall[str], timeline: Timeline | None = None) -> "asyncio.Future[str]":
    """An STT call as a future that may be awaited twice (by the item and the speculation);
    cancelling the future cancels the call on its replica."""
    transcript: asyncio.Future[str] = asyncio.ensure_future(call)

    def done(future: "asyncio.Future[str]") -> None:
        if future.cancelled():
            call.cancel()
        elif future.exception() is None and timeline is not None:
            timeline.mark("transcribed")

    transcript.add_done_callback(done)
    return transcript


async def _speculative_prompt(
    history: Sequence[Item], instructions: str | None, transcript: "asyncio.Future[str]"
) -> list[ChatMessage]:
    messages = await prompt(history, instructions)
    text = await transcript
    return [*messages, {"role": "user", "content": text}] if text else messages

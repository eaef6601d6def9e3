"""Turn-taking: what the VAD's boundaries mean for the conversation and the response.

Runs in its own task, fed by :meth:`AudioInput.next_event`, and never waits on a stage: a
barge-in is acted on the moment it is one, even while a transcription is under way. Speech
during an answer passes the ``interruptions`` gate first: only a real interruption reaches
turn-taking, from its onset. A pause is answered speculatively (``speculation``); the end
of the turn (the VAD's, or under ``semantic_vad`` the end-of-turn model's: ``turn_end``)
commits the utterance (``transcription``) and answers it, adopting the speculative answer
when it heard the same audio. Partial transcripts and the idle timeout are parts of their
own, started and stopped from here.
"""

import logging
from collections.abc import Sequence

import numpy as np
from openai.types.realtime import InputAudioBufferSpeechStartedEvent, InputAudioBufferSpeechStoppedEvent

from deployments.realtime.audio_input import AudioInput, TurnEvent
from deployments.realtime.conversation import prompt, turn_prompt
from deployments.realtime.items import Item
from deployments.realtime.kit import SessionKit
from deployments.realtime.protocol import new_id, server_event
from deployments.realtime.response.responder import Responder
from deployments.realtime.timeline import Timeline
from deployments.realtime.turn_taking.heard import HeardAnswers
from deployments.realtime.turn_taking.idle import IdleTimeout
from deployments.realtime.turn_taking.interruptions import InterruptionGate
from deployments.realtime.turn_taking.partials import PartialTranscripts
from deployments.realtime.turn_taking.speculation import Speculator
from deployments.realtime.turn_taking.transcription import Transcription, stt_future
from deployments.realtime.turn_taking.turn_end import TurnEnd
from handlers.vad import SpeechPaused, SpeechResumed, SpeechStarted, SpeechStopped

logger = logging.getLogger(__name__)


class TurnTaker:
    def __init__(
        self,
        kit: SessionKit,
        audio: AudioInput,
        responder: Responder,
        partial_transcript_interval_s: float | None,
        prefill: bool,
    ) -> None:
        """``prefill``: have the LLM compute the conversation so far while the user speaks."""
        self._kit, self._audio, self._responder, self._prefill = kit, audio, responder, prefill
        self._speech_item_id: str | None = None
        """The utterance being spoken (``None``: the user is not speaking)."""
        self.gate = InterruptionGate(kit, audio, self._act)
        self.heard = HeardAnswers(kit, responder)
        self.turn_end = TurnEnd(kit, audio, self._end_turn)
        self.speculator = Speculator(kit, responder)
        self.partials = PartialTranscripts(
            kit,
            partial_transcript_interval_s,
            speech_so_far=lambda: self.turn_end.utterance(audio.speech_so_far()),
            paused=lambda: self.speculator.active,
        )
        self.transcription = Transcription(kit, partial_text=self.partials.take)
        self.idle = IdleTimeout(
            kit,
            responder,
            self.transcription,
            received_ms=lambda: audio.received_ms,
            user_speaking=lambda: self._speech_item_id is not None,
        )

    async def run(self) -> None:
        while True:
            self.gate.take(await self._audio.next_event())

    def _act(self, event: TurnEvent) -> None:
        vad = event.vad
        if isinstance(vad, SpeechStarted):
            self._speech_started(vad)
        elif isinstance(vad, SpeechPaused):
            assert event.audio is not None
            utterance = self.turn_end.utterance(event.audio)
            transcript = self.speculator.pause(vad.sample, utterance, event.lag_s, self._speech_item_id)
            if self._kit.settings.eagerness is not None:
                self.turn_end.paused(vad.sample, utterance, transcript)
        elif isinstance(vad, SpeechResumed):
            self.speculator.drop("speech_resumed")
            self.turn_end.pause_ended()
        elif isinstance(vad, SpeechStopped):
            assert event.audio is not None
            if self._kit.settings.eagerness is not None and (not vad.too_short or self.turn_end.continuing):
                self.turn_end.stopped(vad, event.audio, event.lag_s, self._kit.settings.eagerness)
            else:
                self.turn_end.pause_ended()
                self._end_turn(vad, event.audio, event.lag_s)
        else:
            self.turn_end.heard(vad.sample)

    def reset(self) -> None:
        """The input restarted (cleared, reconfigured or committed by hand)."""
        self.gate.reset()
        self.turn_end.reset()
        self.speculator.drop("input_restarted")
        self.partials.stop()
        self.partials.take(self._speech_item_id or "")
        self._speech_item_id = None
        self.idle.stop()

    def _speech_started(self, vad: SpeechStarted) -> None:
        if self.turn_end.resumed():  # the user goes on with the turn held at a pause
            self.speculator.drop("speech_resumed")
            return
        self.idle.stop()
        item_id = self._speech_item_id = new_id("item")
        self._kit.outbox.put(
            server_event(InputAudioBufferSpeechStartedEvent, audio_start_ms=vad.audio_start_ms, item_id=item_id)
        )
        if self._kit.settings.interrupt_response:
            heard = self._kit.playback.playing()
            self._responder.cancel("turn_detected")
            if heard:
                self.heard.cut()
            self._kit.playback.stopped()  # the client stops playing at speech_started
        if self._prefill and self._kit.settings.create_response:
            self._kit.spawn(self._prefill_conversation(self._kit.conversation.items))
        self.partials.start(item_id)

    async def _prefill_conversation(self, items: Sequence[Item]) -> None:
        """The conversation before this turn (``items``, as it was when the turn began) is
        how the answer to this turn's prompt will start."""
        if not self._kit.settings.instructions and not any(item.prompted for item in items):
            return  # nothing said yet and no instructions: nothing to compute ahead
        try:
            await self._kit.stages.prefill(await prompt(items, self._kit.settings.instructions))
        except Exception as exc:  # only a head start: the answer computes it anyway
            logger.warning("LLM prefill failed: %r", exc)

    def _end_turn(self, vad: SpeechStopped, utterance: np.ndarray, lag_s: float | None) -> None:
        item_id = self._speech_item_id or new_id("item")
        self._speech_item_id = None
        self.partials.stop()
        self._kit.outbox.put(
            server_event(InputAudioBufferSpeechStoppedEvent, audio_end_ms=vad.audio_end_ms, item_id=item_id)
        )
        if vad.too_short:  # nothing to answer
            self.speculator.drop("too_short")
            self.partials.take(item_id)
            return
        speculation = self.speculator.take(vad.end_sample)
        self._kit.metrics.turn_ended()
        if speculation is None:
            timeline = Timeline(heard_lag_s=lag_s)
            if lag_s is not None:
                timeline.vad_lag_ms = round(lag_s * 1000 - self._silence_ms(), 1)
            transcript = stt_future(self._kit.stages, utterance, timeline)
        else:
            timeline, transcript = speculation.timeline, speculation.transcript
        timeline.speech_stopped(lag_s)
        self.transcription.commit(utterance, item_id, transcript)
        held = speculation.run if speculation is not None else None
        if not self._kit.settings.create_response or self._responder.current is not None:
            if held is not None:
                self._responder.abandon(held, "not_answered")
            return
        current = turn_prompt(self._kit.conversation.items, self._kit.settings.instructions)
        self.speculator.answer_turn(current, timeline, held, item_id)

    def _silence_ms(self) -> int:
        """The pause that ends a turn under the settings in force."""
        turn = self._kit.settings.turn_detection or self._kit.settings.defaults
        return turn.silence_duration_ms

"""One Realtime conversation: the ingress side of the pipeline for a single WebSocket.

Audio in is resampled to 16 kHz and sent to the VAD deployment in batches (one call in
flight per session); utterances go to STT; a response streams LLM deltas through the
sentence chunker into TTS and back out as ``response.output_audio.delta`` events.

Barge-in and discard filtering: every response captures the session scope's generation
and tags its output with it. Cancelling bumps the generation (a local, synchronous
operation), calls ``.cancel()`` on each in-flight Serve stream (cancelling only the
consuming task would leave the replica generating), and from that instant the send loop
drops every event tagged with the old generation, so not one byte of a cancelled
response leaves after its ``response.done``.
"""

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from fastapi import WebSocket, WebSocketDisconnect
from openai import BaseModel as OpenAIModel
from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDone,
    ConversationItemInputAudioTranscriptionCompletedEvent,
    ConversationItemInputAudioTranscriptionDeltaEvent,
    ConversationItemTruncatedEvent,
    InputAudioBufferClearedEvent,
    InputAudioBufferCommittedEvent,
    InputAudioBufferSpeechStartedEvent,
    InputAudioBufferSpeechStoppedEvent,
    RealtimeAudioConfig,
    RealtimeAudioConfigInput,
    RealtimeAudioConfigOutput,
    RealtimeResponse,
    RealtimeResponseStatus,
    RealtimeSessionCreateRequest,
    ResponseAudioDeltaEvent,
    ResponseAudioDoneEvent,
    ResponseAudioTranscriptDeltaEvent,
    ResponseAudioTranscriptDoneEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseDoneEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    SessionCreatedEvent,
    SessionUpdatedEvent,
)
from openai.types.realtime.realtime_audio_formats import AudioPCM
from openai.types.realtime.realtime_audio_input_turn_detection import ServerVad
from ray.serve.handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator

from cancel import SessionScope
from deployments.config import IngressConfig
from deployments.conversation import Item, truncate_spoken, wire_item
from deployments.messages import ChatMessage, LLMRequest, TTSRequest
from deployments.metrics import SessionMetrics
from deployments.protocol import ProtocolError, encode, error_event, new_id, parse_client_event, server_event
from handlers.audio import REALTIME_RATE, SPEECH_RATE, StreamResampler, b64_pcm16_decode, pcm16_to_float
from handlers.text import SpeechChunker
from handlers.vad import (
    SpeechPaused,
    SpeechResumed,
    SpeechStarted,
    TurnDetection,
    UtteranceBuffer,
    VADEvent,
    VADState,
)

log = logging.getLogger(__name__)

AUDIO_FORMAT = AudioPCM(type="audio/pcm", rate=REALTIME_RATE)
MIN_COMMIT_MS = 100
VAD_BATCH_SAMPLES = SPEECH_RATE // 2
"""At most 0.5 s per VAD call, well inside the utterance buffer's look-back."""
VAD_MIN_BATCH = 3 * 512
"""Three silero windows (96 ms) per VAD call while audio keeps coming."""
VAD_BATCH_WAIT_S = 0.1

CancelReason = Literal["turn_detected", "client_cancelled"]


@dataclass(frozen=True)
class Stages:
    """Handles to the four model deployments."""

    vad: DeploymentHandle
    stt: DeploymentHandle
    llm: DeploymentHandle
    tts: DeploymentHandle


@dataclass
class ResponseRun:
    id: str
    item: Item
    generation: int
    speculative: bool = False
    """Started in a pause before the turn was known to end; shown only if it did."""
    streams: set[DeploymentResponseGenerator] = field(default_factory=set)
    task: asyncio.Task[None] | None = None
    audio_ms: int = 0
    held: list[tuple[int | None, OpenAIModel]] | None = field(default_factory=list)
    """Events not yet shown to the client; ``None`` once the run is released."""
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    finished: bool = False

    def abandon(self) -> None:
        """Stop a run the client never saw: nothing to tell it, nothing to discard."""
        for stream in self.streams:
            stream.cancel()
        if self.task is not None:
            self.task.cancel()


@dataclass
class Speculation:
    """Work started in the pause that may end the user's turn (see ``SpeechPaused``): the
    transcript and, when a response would follow, a held response. Adopted when the pause
    becomes the end of the turn with nothing changed; dropped when speech resumes."""

    stt: DeploymentResponse
    transcript: "asyncio.Task[str]"
    prompt: "asyncio.Task[list[ChatMessage]] | None" = None
    run: ResponseRun | None = None

    def cancel(self) -> None:
        self.stt.cancel()
        self.transcript.cancel()
        self.drop_answer()

    def drop_answer(self) -> None:
        """Abandon the held response; the transcript stays usable."""
        if self.prompt is not None:
            self.prompt.cancel()
        if self.run is not None:
            self.run.abandon()


class RealtimeSession:
    def __init__(
        self,
        websocket: WebSocket,
        stages: Stages,
        config: IngressConfig,
        scope: Awaitable[SessionScope],
        model_name: str,
        metrics: SessionMetrics,
    ) -> None:
        self.id = new_id("sess")
        self._metrics = metrics
        self._ws = websocket
        self._stages = stages
        self._config = config
        self._scope_opening = asyncio.ensure_future(scope)
        self._scope: SessionScope | None = None
        self._model_name = model_name
        self._instructions = config.instructions
        self._turn_detection: TurnDetection | None = config.turn_detection
        self._create_response = True
        self._interrupt_response = True
        self._resampler = StreamResampler(REALTIME_RATE, SPEECH_RATE)
        self._audio_in: asyncio.Queue[np.ndarray] = asyncio.Queue(maxsize=64)
        self._buffer = UtteranceBuffer(config.turn_detection.prefix_padding_ms, config.max_input_audio_s)
        self._vad_state = VADState(config.turn_detection)
        self._speech_item_id: str | None = None
        self._speculation: Speculation | None = None
        self._audio_epoch = 0
        """Bumped whenever the audio input restarts; a VAD answer for an older epoch is void."""
        self._outgoing: asyncio.Queue[tuple[int | None, OpenAIModel]] = asyncio.Queue(config.outgoing_events)
        self._items: list[Item] = []
        self._response: ResponseRun | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._frame_bytes = REALTIME_RATE * config.audio_delta_ms // 1000 * 2

    # ---- lifecycle -------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the socket until the client leaves or the server closes it."""
        await self._emit(server_event(SessionCreatedEvent, session=self._describe()))
        self._spawn(self._send_loop())
        self._spawn(self._vad_loop())
        try:
            while True:
                message = await self._ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                await self._on_message(message.get("text") or message.get("bytes") or "")
        except WebSocketDisconnect:
            pass
        finally:
            await self._end()

    async def close(self, code: int, reason: str) -> None:
        """Server-side close (shutdown): stop the response, then close with ``code``."""
        self._cancel_response(None)
        try:
            await self._ws.close(code=code, reason=reason)
        except RuntimeError:  # already closed by the client
            pass

    async def _end(self) -> None:
        """End of session: release every stage's per-session state.

        The in-flight streams are cancelled (the LLM replica aborts its vLLM request, TTS
        stops), the scope is closed on its host (worker views of it report stale), and the
        VAD state, audio buffers and queues die with this object.
        """
        self._cancel_response(None)
        self._drop_speculation()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            scope = await self._scope_opening
        except Exception:  # the scope never opened: nothing to release
            log.exception("session %s: scope did not open", self.id)
            return
        await scope.close()

    def _spawn(self, coroutine: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_crash)
        return task

    # ---- sending ---------------------------------------------------------------------

    async def _emit(self, event: OpenAIModel, generation: int | None = None) -> None:
        """Queue an event; ``generation`` tags response output for discard filtering."""
        await self._outgoing.put((generation, event))

    async def _send_loop(self) -> None:
        while True:
            generation, event = await self._outgoing.get()
            if generation is not None and self._scope is not None and self._scope.is_stale(generation):
                self._metrics.dropped()
                continue  # output of a cancelled response: never reaches the client
            await self._ws.send_text(encode(event))
            self._metrics.sent(event)

    async def _fail(self, error: ProtocolError) -> None:
        await self._emit(error_event(error))

    # ---- receiving -------------------------------------------------------------------

    async def _on_message(self, text: str | bytes) -> None:
        try:
            event = parse_client_event(text)
        except ProtocolError as error:
            await self._fail(error)
            return
        handler: Callable[[Any], Awaitable[None]] | None = getattr(self, "_on_" + event.type.replace(".", "_"), None)
        try:
            if handler is None:
                raise ProtocolError("unsupported_event", f"{event.type} is not supported by this server", "type")
            await handler(event)
        except ProtocolError as error:
            error.event_id = error.event_id or event.event_id
            await self._fail(error)

    async def _on_session_update(self, event: Any) -> None:
        session = event.session
        if session.type != "realtime":
            raise ProtocolError("unsupported_value", "only realtime sessions are served", "session.type")
        if "instructions" in session.model_fields_set:
            self._instructions = session.instructions
        if session.output_modalities not in (None, ["audio"]):
            raise ProtocolError("unsupported_value", "output_modalities must be ['audio']", "session.output_modalities")
        audio = session.audio
        if audio is not None and audio.output is not None:
            _check_format(audio.output.format, "session.audio.output.format")
        if audio is not None and audio.input is not None:
            _check_format(audio.input.format, "session.audio.input.format")
            if "turn_detection" in audio.input.model_fields_set:
                self._set_turn_detection(audio.input.turn_detection)
        await self._emit(server_event(SessionUpdatedEvent, session=self._describe()))

    def _set_turn_detection(self, requested: Any) -> None:
        if requested is None:
            self._turn_detection = None
        elif requested.type == "server_vad":
            defaults = self._config.turn_detection
            self._turn_detection = TurnDetection(
                threshold=defaults.threshold if requested.threshold is None else requested.threshold,
                prefix_padding_ms=defaults.prefix_padding_ms
                if requested.prefix_padding_ms is None
                else requested.prefix_padding_ms,
                silence_duration_ms=defaults.silence_duration_ms
                if requested.silence_duration_ms is None
                else requested.silence_duration_ms,
                min_speech_duration_ms=defaults.min_speech_duration_ms,
            )
            self._create_response = requested.create_response is not False
            self._interrupt_response = requested.interrupt_response is not False
        else:
            raise ProtocolError(
                "unsupported_value",
                f"turn_detection {requested.type!r} is not supported",
                "session.audio.input.turn_detection",
            )
        self._restart_audio_input()

    def _restart_audio_input(self) -> None:
        """New settings or a cleared buffer: forget the audio and the detector's state."""
        self._drop_speculation()
        settings = self._turn_detection or self._config.turn_detection
        self._vad_state = VADState(settings)
        self._buffer = UtteranceBuffer(settings.prefix_padding_ms, self._config.max_input_audio_s)
        if self._turn_detection is None:
            self._buffer.keep_all()
        self._speech_item_id = None
        self._audio_epoch += 1

    async def _on_input_audio_buffer_append(self, event: Any) -> None:
        try:
            pcm = b64_pcm16_decode(event.audio)
        except ValueError as exc:
            raise ProtocolError("invalid_value", str(exc), "audio") from None
        if pcm:
            await self._audio_in.put(self._resampler.process(pcm16_to_float(pcm)))

    async def _on_input_audio_buffer_commit(self, event: Any) -> None:
        await self._audio_in.join()  # every append before the commit is in the buffer
        utterance = self._buffer.take()
        if self._turn_detection is None:
            self._buffer.keep_all()
        if len(utterance) < SPEECH_RATE * MIN_COMMIT_MS // 1000:
            raise ProtocolError(
                "input_audio_buffer_commit_empty",
                f"buffer too small: expected at least {MIN_COMMIT_MS}ms of audio",
            )
        self._speech_item_id = None
        await self._commit(utterance, new_id("item"))

    async def _on_input_audio_buffer_clear(self, event: Any) -> None:
        await self._audio_in.join()
        self._restart_audio_input()
        await self._emit(server_event(InputAudioBufferClearedEvent))

    async def _on_conversation_item_create(self, event: Any) -> None:
        item = event.item
        if item.type != "message" or any(
            part.type not in ("input_text", "text", "output_text") for part in item.content
        ):
            raise ProtocolError("unsupported_value", "only text message items can be created", "item")
        text = " ".join(part.text or "" for part in item.content)
        added = Item(item.id or new_id("item"), item.role, text)
        previous = self._items[-1].id if self._items else None
        self._items.append(added)
        self._trim_history()
        await self._emit(server_event(ConversationItemAdded, item=wire_item(added), previous_item_id=previous))
        await self._emit(server_event(ConversationItemDone, item=wire_item(added), previous_item_id=previous))

    async def _on_conversation_item_truncate(self, event: Any) -> None:
        item = next((i for i in self._items if i.id == event.item_id), None)
        if item is None or item.role != "assistant":
            raise ProtocolError("invalid_value", f"no assistant item {event.item_id!r}", "item_id")
        played = item.spoken[-1][0] if item.spoken else 0
        if event.audio_end_ms > played:
            raise ProtocolError(
                "invalid_value",
                f"audio_end_ms {event.audio_end_ms} is past the item's {played} ms of audio",
                "audio_end_ms",
            )
        item.text, item.spoken = truncate_spoken(item.spoken, event.audio_end_ms)
        await self._emit(
            server_event(
                ConversationItemTruncatedEvent, item_id=item.id, content_index=0, audio_end_ms=event.audio_end_ms
            )
        )

    async def _on_response_create(self, event: Any) -> None:
        if self._response is not None:
            raise ProtocolError("conversation_already_has_active_response", "a response is already in progress")
        self._metrics.turn_ended()
        await self._start_response()

    async def _on_response_cancel(self, event: Any) -> None:
        done = self._cancel_response("client_cancelled")
        if done is None:
            raise ProtocolError("response_cancel_not_active", "there is no response in progress to cancel")
        await self._emit(done)

    # ---- audio input and turns ---------------------------------------------------------

    async def _vad_loop(self) -> None:
        while True:
            audio, epoch = await self._next_audio()
            if self._turn_detection is None:
                continue
            try:
                state, events = await self._stages.vad.detect.remote(self._vad_state, audio)
            except Exception as exc:  # a replica lost mid-call: report it, keep listening
                log.exception("session %s: VAD call failed", self.id)
                await self._emit(error_event(ProtocolError("vad_failed", str(exc)), "server_error"))
                continue
            if epoch != self._audio_epoch:
                continue  # cleared or reconfigured meanwhile: this answer is void
            self._vad_state = state
            for vad_event in events:
                await self._on_vad_event(vad_event)

    async def _next_audio(self) -> tuple[np.ndarray, int]:
        """Audio for one VAD call, and the input epoch it belongs to.

        Clients send 20-100 ms frames; one Serve call per frame would cost more CPU than
        the model. So a call waits for ``VAD_MIN_BATCH`` samples (or ``VAD_BATCH_WAIT_S``
        without more audio) and takes at most ``VAD_BATCH_SAMPLES``. Each frame enters the
        utterance buffer as soon as it is taken, so a commit never waits for the VAD.
        """
        pieces = [self._take_audio(await self._audio_in.get())]
        epoch = self._audio_epoch
        deadline = asyncio.get_running_loop().time() + VAD_BATCH_WAIT_S
        while (total := sum(map(len, pieces))) < VAD_BATCH_SAMPLES:
            if self._audio_in.empty():
                if total >= VAD_MIN_BATCH:
                    break
                try:
                    async with asyncio.timeout_at(deadline):
                        pieces.append(self._take_audio(await self._audio_in.get()))
                except TimeoutError:
                    break
            else:
                pieces.append(self._take_audio(self._audio_in.get_nowait()))
        return np.concatenate(pieces), epoch

    def _take_audio(self, piece: np.ndarray) -> np.ndarray:
        self._buffer.append(piece)
        self._audio_in.task_done()
        return piece

    async def _on_vad_event(self, event: VADEvent) -> None:
        if isinstance(event, SpeechPaused):
            # Transcribe, and start answering, during the silence that may end the turn:
            # if it does, that work is done or under way when the turn ends.
            self._drop_speculation()
            stt = self._stages.stt.transcribe.remote(self._buffer.peek(event.sample))
            speculation = self._speculation = Speculation(stt, asyncio.ensure_future(_result(stt)))
            if self._create_response and self._response is None:
                history = list(self._items)  # the conversation this turn would extend
                speculation.prompt = asyncio.ensure_future(self._speculative_prompt(history, speculation.transcript))
                speculation.run = await self._new_run(speculative=True)
                speculation.run.task = self._spawn(self._respond(speculation.run, speculation.prompt))
            return
        if isinstance(event, SpeechResumed):
            self._drop_speculation()
            return
        if isinstance(event, SpeechStarted):
            self._buffer.mark_start(event.start_sample)
            self._speech_item_id = new_id("item")
            done = self._cancel_response("turn_detected") if self._interrupt_response else None
            await self._emit(
                server_event(
                    InputAudioBufferSpeechStartedEvent,
                    audio_start_ms=event.audio_start_ms,
                    item_id=self._speech_item_id,
                )
            )
            if done is not None:
                await self._emit(done)
            return
        item_id = self._speech_item_id or new_id("item")
        self._speech_item_id = None
        speculation, self._speculation = self._speculation, None
        utterance = self._buffer.take(event.end_sample)
        await self._emit(
            server_event(InputAudioBufferSpeechStoppedEvent, audio_end_ms=event.audio_end_ms, item_id=item_id)
        )
        if event.too_short:
            if speculation is not None:
                speculation.cancel()
            return
        self._metrics.turn_ended()
        await self._commit(utterance, item_id, speculation.transcript if speculation else None)
        answer = self._create_response and self._response is None
        if answer and speculation is not None and await self._adopt(speculation):
            return
        if speculation is not None:
            speculation.drop_answer()
        if answer:
            await self._start_response()

    def _drop_speculation(self) -> None:
        if self._speculation is not None:
            self._speculation.cancel()
            self._speculation = None

    async def _speculative_prompt(self, history: list[Item], transcript: Awaitable[str]) -> list[ChatMessage]:
        return [*await self._prompt(history), {"role": "user", "content": await transcript}]

    async def _adopt(self, speculation: Speculation) -> bool:
        """Show the held response if it answers exactly what the turn ended with."""
        run = speculation.run
        if run is None or speculation.prompt is None:
            return False
        try:
            speculated = await speculation.prompt
        except Exception:  # its transcription failed: answer afresh
            return False
        current = await self._prompt()
        failed = run.task is not None and run.task.done() and not run.finished
        if failed or speculated != current or self._scope is None or self._scope.is_stale(run.generation):
            return False
        if not run.finished:
            self._response = run
        await self._release(run)
        return True

    async def _commit(self, utterance: np.ndarray, item_id: str, transcript: Awaitable[str] | None = None) -> None:
        """Add the user's audio item; ``transcript`` is an STT call already under way."""
        previous = self._items[-1].id if self._items else None
        item = Item(item_id, "user", transcribed=asyncio.get_running_loop().create_future())
        self._items.append(item)
        self._trim_history()
        await self._emit(server_event(InputAudioBufferCommittedEvent, item_id=item_id, previous_item_id=previous))
        await self._emit(server_event(ConversationItemAdded, item=wire_item(item), previous_item_id=previous))
        transcript = transcript or self._stages.stt.transcribe.remote(utterance)
        self._spawn(self._transcribe(item, transcript, len(utterance) / SPEECH_RATE, previous))

    async def _transcribe(self, item: Item, transcript: Awaitable[str], seconds: float, previous: str | None) -> None:
        assert item.transcribed is not None
        try:
            item.text = await transcript
        finally:
            item.transcribed.set_result(None)
        await self._emit(
            server_event(
                ConversationItemInputAudioTranscriptionDeltaEvent, item_id=item.id, content_index=0, delta=item.text
            )
        )
        await self._emit(
            server_event(
                ConversationItemInputAudioTranscriptionCompletedEvent,
                item_id=item.id,
                content_index=0,
                transcript=item.text,
                usage={"type": "duration", "seconds": round(seconds, 3)},
            )
        )
        await self._emit(server_event(ConversationItemDone, item=wire_item(item), previous_item_id=previous))

    # ---- responses -------------------------------------------------------------------

    async def _new_run(self, speculative: bool) -> ResponseRun:
        scope = self._scope = await self._scope_opening
        scope.new_response()
        return ResponseRun(new_id("resp"), Item(new_id("item"), "assistant"), scope.generation, speculative)

    async def _start_response(self) -> None:
        run = self._response = await self._new_run(speculative=False)
        run.task = self._spawn(self._respond(run, self._prompt()))

    async def _emit_run(self, run: ResponseRun, event: OpenAIModel, output: bool = True) -> None:
        """Emit a response's event: held while the run is speculative, and tagged with its
        generation when it is output (so it is discarded once the response is cancelled)."""
        generation = run.generation if output else None
        async with run.lock:
            if run.held is not None:
                run.held.append((generation, event))
            else:
                await self._emit(event, generation)

    async def _release(self, run: ResponseRun) -> None:
        """Show a run to the client: its item joins the conversation, held events go out."""
        async with run.lock:
            held, run.held = run.held or [], None
            for generation, event in held:
                await self._emit(event, generation)
            previous = self._items[-1].id if self._items else None
            self._items.append(run.item)
            self._trim_history()
            wire = wire_item(run.item, "in_progress")
            await self._emit(server_event(ConversationItemAdded, item=wire, previous_item_id=previous))

    def _cancel_response(self, reason: CancelReason | None) -> OpenAIModel | None:
        """Barge-in, ``response.cancel`` or end of session; returns the ``response.done``
        to send, or ``None`` when no response was active.

        Synchronous on purpose: nothing of the old response can be sent between the
        decision and the generation bump.
        """
        run, self._response = self._response, None
        if run is None:
            return None
        assert self._scope is not None
        if reason is not None:
            self._metrics.cancelled(reason)
        self._scope.cancel()  # from here on the send loop drops this response's output
        run.abandon()
        status = RealtimeResponseStatus(type="cancelled", reason=reason)
        return server_event(ResponseDoneEvent, response=self._wire_response(run, "cancelled", status))

    async def _respond(self, run: ResponseRun, prompt: Awaitable[list[ChatMessage]]) -> None:
        assert self._scope is not None
        scope, gen = self._scope, run.generation
        common = {"response_id": run.id, "item_id": run.item.id, "output_index": 0, "content_index": 0}
        try:
            await self._emit_run(
                run, server_event(ResponseCreatedEvent, response=self._wire_response(run, "in_progress")), False
            )
            if not run.speculative:
                await self._release(run)
            messages = await prompt
            wire = wire_item(run.item, "in_progress")
            await self._emit_run(
                run, server_event(ResponseOutputItemAddedEvent, response_id=run.id, output_index=0, item=wire), False
            )
            part = {"type": "audio", "transcript": ""}
            await self._emit_run(run, server_event(ResponseContentPartAddedEvent, part=part, **common), False)
            ticket = scope.ticket(gen)
            llm = self._stages.llm.options(stream=True).stream.remote(LLMRequest(messages, ticket, run.id))
            run.streams.add(llm)
            pieces: asyncio.Queue[str | None] = asyncio.Queue(maxsize=4)
            chunker = SpeechChunker(first_chunk_max_words=self._config.first_chunk_words)
            producer = asyncio.ensure_future(_chunk(llm, chunker, pieces))
            try:
                while (piece := await pieces.get()) is not None:
                    await self._speak(run, piece, ticket)
                await producer
            finally:
                producer.cancel()
            await self._finish(run)
        except asyncio.CancelledError:
            raise
        except Exception:  # a stage failed or stopped early: this response fails, the session goes on
            log.exception("response %s failed", run.id)
            if self._response is run:
                self._response = None
                error = ProtocolError("response_failed", f"response {run.id} could not be completed; it was cut short")
                status = RealtimeResponseStatus(type="failed", error={"type": "server_error", "code": error.code})
                await self._emit_run(run, error_event(error, "server_error"), False)
                await self._emit_run(
                    run, server_event(ResponseDoneEvent, response=self._wire_response(run, "failed", status)), False
                )
        finally:
            scope.response_done(gen)

    async def _speak(self, run: ResponseRun, piece: str, ticket: Any) -> None:
        text = piece if not run.item.text else " " + piece
        common = {"response_id": run.id, "item_id": run.item.id, "output_index": 0, "content_index": 0}
        await self._emit_run(run, server_event(ResponseAudioTranscriptDeltaEvent, delta=text, **common))
        tts = self._stages.tts.options(stream=True).synthesize.remote(TTSRequest(piece, ticket))
        run.streams.add(tts)
        async for pcm in tts:
            for offset in range(0, len(pcm), self._frame_bytes):
                frame = pcm[offset : offset + self._frame_bytes]
                delta = base64.b64encode(frame).decode("ascii")
                await self._emit_run(run, server_event(ResponseAudioDeltaEvent, delta=delta, **common))
                run.audio_ms += len(frame) * 1000 // (2 * REALTIME_RATE)
        run.streams.discard(tts)
        run.item.text += text
        run.item.spoken.append((run.audio_ms, text))

    async def _finish(self, run: ResponseRun) -> None:
        if self._response is run:
            self._response = None
        run.finished = True
        common = {"response_id": run.id, "item_id": run.item.id, "output_index": 0, "content_index": 0}
        wire = wire_item(run.item)
        part = {"type": "audio", "transcript": run.item.text}
        for event in (
            server_event(ResponseAudioDoneEvent, **common),
            server_event(ResponseAudioTranscriptDoneEvent, transcript=run.item.text, **common),
            server_event(ResponseContentPartDoneEvent, part=part, **common),
            server_event(ResponseOutputItemDoneEvent, response_id=run.id, output_index=0, item=wire),
            server_event(ConversationItemDone, item=wire),
            server_event(ResponseDoneEvent, response=self._wire_response(run, "completed")),
        ):
            await self._emit_run(run, event)

    async def _prompt(self, items: list[Item] | None = None) -> list[ChatMessage]:
        """The conversation (default: the session's) for the LLM, once every user
        utterance in it is transcribed."""
        items = self._items if items is None else items
        pending = [i.transcribed for i in items if i.transcribed is not None and not i.transcribed.done()]
        if pending:
            await asyncio.gather(*pending)
        messages = [{"role": "system", "content": self._instructions}] if self._instructions else []
        messages += [{"role": i.role, "content": i.text} for i in items if i.text]
        return messages

    def _trim_history(self) -> None:
        del self._items[: max(0, len(self._items) - self._config.history_items)]

    # ---- descriptions ------------------------------------------------------------------

    def _describe(self) -> RealtimeSessionCreateRequest:
        turn = self._turn_detection
        return RealtimeSessionCreateRequest(
            type="realtime",
            model=self._model_name,
            instructions=self._instructions,
            output_modalities=["audio"],
            audio=RealtimeAudioConfig(
                input=RealtimeAudioConfigInput(
                    format=AUDIO_FORMAT,
                    turn_detection=None
                    if turn is None
                    else ServerVad(
                        type="server_vad",
                        threshold=turn.threshold,
                        prefix_padding_ms=turn.prefix_padding_ms,
                        silence_duration_ms=turn.silence_duration_ms,
                        create_response=self._create_response,
                        interrupt_response=self._interrupt_response,
                    ),
                ),
                output=RealtimeAudioConfigOutput(format=AUDIO_FORMAT),
            ),
        )

    def _wire_response(
        self, run: ResponseRun, status: str, details: RealtimeResponseStatus | None = None
    ) -> RealtimeResponse:
        return RealtimeResponse(
            id=run.id,
            object="realtime.response",
            status=status,
            status_details=details,
            output_modalities=["audio"],
            output=[] if status == "in_progress" else [wire_item(run.item, status)],
        )


async def _chunk(llm: DeploymentResponseGenerator, chunker: SpeechChunker, pieces: "asyncio.Queue[str | None]") -> None:
    """LLM deltas -> speakable pieces; ``None`` marks the end (also of a failed stream,
    whose error the consumer then gets by awaiting this task)."""
    try:
        async for delta in llm:
            for piece in chunker.feed(delta):
                await pieces.put(piece)
        for piece in chunker.flush():
            await pieces.put(piece)
    finally:
        await pieces.put(None)


async def _result(response: DeploymentResponse) -> Any:
    """A Serve response as a task, which (unlike the response) may be awaited twice."""
    return await response


def _check_format(audio_format: Any, param: str) -> None:
    if audio_format is not None and (
        audio_format.type not in (None, "audio/pcm") or audio_format.rate not in (None, REALTIME_RATE)
    ):
        raise ProtocolError("unsupported_value", "only audio/pcm at 24000 Hz is supported", param)


def _log_crash(task: "asyncio.Task[Any]") -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("session task failed", exc_info=task.exception())

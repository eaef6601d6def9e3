"""The wire events of one response, in one place: what the client sees of a run, in order.

Every event goes to the outbox tagged with the run's id, so what a cancel drops is the
outbox's decision (by event type), and a held run's events wait there until it is shown.
"""

from typing import Any

from openai import BaseModel as OpenAIModel
from openai.types.realtime import (
    ConversationItemAdded,
    ConversationItemDone,
    RealtimeResponse,
    RealtimeResponseStatus,
    ResponseAudioDoneEvent,
    ResponseAudioTranscriptDeltaEvent,
    ResponseAudioTranscriptDoneEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseDoneEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseFunctionCallArgumentsDoneEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)

from deployments.realtime.items import FunctionCall, Item
from deployments.realtime.outbox import Outbox, Sent
from deployments.realtime.protocol import ProtocolError, error_event, server_event
from deployments.realtime.response.run import ResponseRun
from deployments.realtime.transports.audio_out import AnswerAudio


class ResponseEvents:
    """What the client is told of ``run``: lifecycle, outputs, content, and the end."""

    def __init__(self, outbox: Outbox, run: ResponseRun) -> None:
        self._outbox = outbox
        self._run = run

    def created(self) -> None:
        self._emit(ResponseCreatedEvent, response=wire_response(self._run))

    def output_added(self, item: Item, previous_item_id: str | None) -> None:
        """``item`` is the run's next output (``previous_item_id``: where it sits in the
        conversation; only for runs that answer into it)."""
        run = self._run
        wire = item.wire("in_progress")
        if run.options.in_conversation:
            self._emit(ConversationItemAdded, item=wire, previous_item_id=previous_item_id)
        self._emit(ResponseOutputItemAddedEvent, response_id=run.id, output_index=run.output_index(item), item=wire)
        if item is run.answer:
            self._emit(ResponseContentPartAddedEvent, part=_part(run, ""), **_answer_ids(run))

    def transcript_delta(self, text: str) -> None:
        self._emit(ResponseAudioTranscriptDeltaEvent, delta=text, **_answer_ids(self._run))

    def audio(self, pcm16: bytes, on_sent: Sent) -> None:
        """A frame of the answer's audio (24 kHz PCM16): the transport sends it its own way."""
        run = self._run
        frame = AnswerAudio(run.id, run.answer.id, run.output_index(run.answer), run.options.output_audio, pcm16)
        self._outbox.put(frame, run.id, on_sent)

    def text_delta(self, delta: str, on_sent: Sent) -> None:
        self._emit(ResponseTextDeltaEvent, on_sent, delta=delta, **_answer_ids(self._run))

    def arguments_delta(self, call: FunctionCall, delta: str, on_sent: Sent) -> None:
        self._emit(ResponseFunctionCallArgumentsDeltaEvent, on_sent, delta=delta, **_call_ids(self._run, call))

    def answer_done(self) -> None:
        """The spoken or written answer's content is whole."""
        run = self._run
        answer, ids = run.answer, _answer_ids(run)
        if answer.spoken_aloud:
            self._emit(ResponseAudioDoneEvent, **ids)
            self._emit(ResponseAudioTranscriptDoneEvent, transcript=answer.text, **ids)
        else:
            self._emit(ResponseTextDoneEvent, text=answer.text, **ids)
        self._emit(ResponseContentPartDoneEvent, part=_part(run, answer.text), **ids)

    def arguments_done(self, call: FunctionCall) -> None:
        self._emit(
            ResponseFunctionCallArgumentsDoneEvent,
            name=call.name,
            arguments=call.arguments,
            **_call_ids(self._run, call),
        )

    def output_done(self, item: Item) -> None:
        run = self._run
        self._emit(
            ResponseOutputItemDoneEvent, response_id=run.id, output_index=run.output_index(item), item=item.wire()
        )
        if run.options.in_conversation:
            self._emit(ConversationItemDone, item=item.wire())

    def failed(self, error: ProtocolError) -> None:
        self._outbox.put(error_event(error, "server_error"), self._run.id)

    def done(self, details: RealtimeResponseStatus | None = None, on_sent: Sent | None = None) -> None:
        """The end, with the turn's timings in ``metadata`` beside the client's own."""
        response = wire_response(self._run, details)
        response.metadata = dict(response.metadata or {})
        self._run.timeline.tell(response.metadata)
        self._emit(ResponseDoneEvent, on_sent, response=response)

    def _emit(self, event_type: type[OpenAIModel], on_sent: Sent | None = None, **fields: Any) -> None:
        self._outbox.put(server_event(event_type, **fields), self._run.id, on_sent)


def wire_response(run: ResponseRun, details: RealtimeResponseStatus | None = None) -> RealtimeResponse:
    status = "incomplete" if run.cut_at_cap and run.status == "completed" else run.status
    return RealtimeResponse(
        id=run.id,
        object="realtime.response",
        status=status,
        status_details=details,
        output_modalities=["audio"] if run.answer.spoken_aloud else ["text"],
        conversation_id=None if run.options.in_conversation else "none",
        max_output_tokens=run.options.max_output_tokens or "inf",
        metadata=run.options.metadata,
        output=[] if status == "in_progress" else [item.wire(status) for item in run.outputs],
    )


def _part(run: ResponseRun, text: str) -> dict[str, str]:
    return {"type": "audio", "transcript": text} if run.answer.spoken_aloud else {"type": "text", "text": text}


def _answer_ids(run: ResponseRun) -> dict[str, Any]:
    """Where the answer's content is: its item's place among the run's outputs."""
    return {
        "response_id": run.id,
        "item_id": run.answer.id,
        "output_index": run.output_index(run.answer),
        "content_index": 0,
    }


def _call_ids(run: ResponseRun, call: FunctionCall) -> dict[str, Any]:
    return {"response_id": run.id, "item_id": call.id, "output_index": run.output_index(call), "call_id": call.call_id}

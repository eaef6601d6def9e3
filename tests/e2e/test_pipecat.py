"""pipecat's ``OpenAIRealtimeLLMService`` (pipecat-ai 1.14), as its users wire it, against the
real stack (local Ray, CPU models): a spoken turn, then a function-tool round trip -- with zero
``error`` events, no ``ErrorFrame`` and a receive loop that never dies.

pipecat is the other big Realtime client framework besides the Agents SDK, and it is strict
where the SDK is lenient: every server event it knows is validated with pydantic, and a
failure kills its receive loop with only a log line to show for it. So besides the server's
``error`` events, this test watches pipecat's own log (warnings and errors) and its frames.

No transport: the test queues ``InputAudioRawFrame`` s as a microphone would (20 ms each) and a
sink after the service plays the output transport's part (bot started/stopped speaking).
Without context aggregators, the sink is also what asks for the answer after a tool result:
it pushes an ``LLMContextFrame`` upstream on ``FunctionCallResultFrame``, as pipecat's
assistant aggregator does.

SmolLM2-135M never calls a tool under ``tool_choice: "auto"``, and pipecat's session model
only takes ``"auto" | "none" | "required"`` (a named function would fail its validation of the
server's ``session.updated``). So the weather turn runs under ``"required"`` -- set at runtime
with ``LLMUpdateSettingsFrame`` -- and the tool hands the choice back (``"none"``) before it
returns, so that the answer after its result is spoken from it rather than a second forced call.

What the 135M model says varies between runs and machines (and so does what tiny.en hears of
the spoken questions), so the test asserts the protocol and the audio, not the answers'
content: each answer is non-empty and voiced, and the call's arguments are a JSON object that
fits the tool's schema.
"""

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from loguru import logger
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    CancelFrame,
    EndFrame,
    ErrorFrame,
    Frame,
    FunctionCallResultFrame,
    InputAudioRawFrame,
    LLMContextFrame,
    LLMUpdateSettingsFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.realtime import events
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner

from deployments.realtime.timeline import TIMINGS_KEY

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

TURN_TIMEOUT_S = 90
RATE = 24_000
FRAME_BYTES = RATE * 2 // 50  # 20 ms of PCM16 mono
WEATHER = FunctionSchema(
    name="get_weather",
    description="Get the current weather for a city.",
    properties={"city": {"type": "string", "description": 'The city, e.g. "Rome".'}},
    required=["city"],
)
SPOKEN_S_PER_WORD = 0.15
"""Less audio than this per word of an answer's text means words were never voiced."""
# Server events too many to log one by one; their count is enough.
NOISY = ("response.output_audio.delta", "response.output_audio_transcript.delta", "input_audio_buffer.append")


class Log:
    """Everything that happened, in order: server and client events (a tap on the websocket),
    the frames the service pushed, and pipecat's warnings and errors."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}
        self.started = time.monotonic()
        self._waiters: set[asyncio.Event] = set()

    def add(self, src: str, kind: str, **detail: Any) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        last = self.entries[-1] if self.entries else None
        if kind in NOISY:
            return
        if kind in ("TTSAudioRawFrame", "TTSTextFrame") and last is not None and last["type"] == kind:
            last["n"] += 1  # one entry per run of audio / transcript frames
            for key in ("bytes", "text"):
                if key in detail:
                    last[key] += detail[key]
        else:
            self.entries.append({"t": round(time.monotonic() - self.started, 2), "src": src, "type": kind} | detail)
            if kind in ("TTSAudioRawFrame", "TTSTextFrame"):
                self.entries[-1]["n"] = 1
        for waiter in self._waiters:
            waiter.set()

    def mark(self) -> int:
        return len(self.entries)

    async def until(self, done: Callable[[list[dict[str, Any]]], bool], since: int = 0) -> None:
        """Wait until ``done(entries[since:])``; fail at once on an error."""
        changed = asyncio.Event()
        self._waiters.add(changed)
        try:
            async with asyncio.timeout(TURN_TIMEOUT_S):
                while True:
                    changed.clear()
                    assert errors(self.entries) == [], errors(self.entries)
                    if done(self.entries[since:]):
                        return
                    await changed.wait()
        finally:
            self._waiters.discard(changed)


class TapWebSocket:
    """The service's websocket, with every event that passes through it logged."""

    def __init__(self, ws: Any, log: Log) -> None:
        self._ws = ws
        self._log = log

    async def send(self, data: str) -> None:
        kind, detail = summarize(json.loads(data))
        self._log.add("client", kind, **detail)
        await self._ws.send(data)

    def __aiter__(self) -> Any:
        return self._receive()

    async def _receive(self) -> Any:
        async for message in self._ws:
            kind, detail = summarize(json.loads(message))
            self._log.add("server", kind, **detail)
            yield message

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ws, name)


def summarize(event: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    kind = event.get("type", "?")
    detail: dict[str, Any] = {}
    if kind in ("session.update", "session.updated", "session.created"):
        detail["tool_choice"] = event["session"].get("tool_choice")
    elif kind == "error":
        detail["error"] = event.get("error")
    elif kind == "response.create":
        detail["response"] = event.get("response")
    elif kind in ("response.done", "response.created"):
        detail["status"] = event["response"].get("status")
        timings = (event["response"].get("metadata") or {}).get(TIMINGS_KEY)
        if timings is not None:
            detail["timings"] = json.loads(timings)
    elif kind == "response.function_call_arguments.done":
        detail.update(name=event.get("name"), arguments=event.get("arguments"))
    elif kind in ("conversation.item.added", "conversation.item.create"):
        item = event["item"]
        detail["item"] = {k: item[k] for k in ("type", "role", "name", "call_id", "output") if k in item}
    elif kind == "response.output_audio_transcript.done":
        detail["transcript"] = event.get("transcript")
    return kind, detail


class TappedRealtimeLLM(OpenAIRealtimeLLMService):
    def __init__(self, log: Log, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._tap_log = log

    async def _connect(self) -> None:
        await super()._connect()  # the receive task it creates starts iterating after this returns
        if self._websocket is not None and not isinstance(self._websocket, TapWebSocket):
            self._websocket = TapWebSocket(self._websocket, self._tap_log)


class FrameLog(BaseObserver):
    """Logs the frames the service pushes, both ways (ErrorFrames travel upstream)."""

    def __init__(self, llm: OpenAIRealtimeLLMService, log: Log) -> None:
        super().__init__()
        self._llm = llm
        self._log = log

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        if data.source is not self._llm or isinstance(frame, InputAudioRawFrame):
            return
        detail: dict[str, Any] = {"dir": data.direction.name}
        if isinstance(frame, TTSAudioRawFrame):
            detail["bytes"] = len(frame.audio)
        elif isinstance(frame, (TTSTextFrame, TranscriptionFrame)):
            detail["text"] = frame.text
        elif isinstance(frame, FunctionCallResultFrame):
            detail.update(function=frame.function_name, result=frame.result)
        elif isinstance(frame, ErrorFrame):
            detail["error"] = frame.error
        self._log.add("frame", type(frame).__name__, **detail)


class Speaker(FrameProcessor):
    """The output transport's part: says when the bot starts and stops speaking, and -- in
    place of the assistant aggregator -- asks for the answer once a tool result is in."""

    def __init__(self) -> None:
        super().__init__()
        self._context = LLMContext()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            if isinstance(frame, FunctionCallResultFrame):
                # The service sent the function_call_output as it pushed this frame; a context
                # coming back up makes it send response.create.
                await self.push_frame(LLMContextFrame(context=self._context), FrameDirection.UPSTREAM)
            elif isinstance(frame, TTSStartedFrame):
                await self.push_frame(BotStartedSpeakingFrame(), FrameDirection.UPSTREAM)
            elif isinstance(frame, TTSStoppedFrame):
                await self.push_frame(BotStoppedSpeakingFrame(), FrameDirection.UPSTREAM)
        await self.push_frame(frame, direction)


async def test_pipecat_speaks_and_completes_a_tool_round_trip(realtime_url: str, pcm24k, capsys) -> None:
    log = Log()
    calls: list[Any] = []
    sink = logger.add(
        lambda m: log.add("log", m.record["level"].name, where=m.record["name"], msg=m.record["message"][:800]),
        level="WARNING",
    )
    properties = events.SessionProperties(
        output_modalities=["audio"],
        audio=events.AudioConfiguration(
            input=events.AudioInput(
                format=events.PCMAudioFormat(),
                transcription=events.InputAudioTranscription(model="whisper-1"),
                turn_detection=events.TurnDetection(silence_duration_ms=500),
            ),
            output=events.AudioOutput(format=events.PCMAudioFormat(), voice="alloy"),
        ),
        tools=ToolsSchema(standard_tools=[WEATHER]),
        tool_choice="auto",
    )
    llm = TappedRealtimeLLM(
        log,
        api_key="unused",
        base_url=f"{realtime_url}/realtime",  # pipecat appends ?model=…
        settings=OpenAIRealtimeLLMService.Settings(
            model="gpt-realtime",
            system_instruction="You are a helpful voice assistant.",
            session_properties=properties,
        ),
    )

    async def choose_tool(choice: str) -> None:
        """A runtime settings update: the session properties are replaced whole, tools and all."""
        mark = log.mark()
        delta = OpenAIRealtimeLLMService.Settings(
            session_properties=properties.model_copy(update={"tool_choice": choice})
        )
        await llm.queue_frame(LLMUpdateSettingsFrame(delta=delta))
        await log.until(lambda new: any(is_event(e, "session.updated", tool_choice=choice) for e in new), mark)

    async def get_weather(params: FunctionCallParams) -> None:
        calls.append(params.arguments)
        city = params.arguments.get("city")
        await choose_tool("none")  # before the result, so the response.create after it is not forced too
        await params.result_callback({"city": city, "weather": "sunny", "temperature_celsius": 21})

    llm.register_function("get_weather", get_weather)
    worker = PipelineWorker(
        Pipeline([llm, Speaker()]),
        params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE),
        enable_rtvi=False,
        idle_timeout_secs=None,
        observers=[FrameLog(llm, log)],
    )
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        await log.until(lambda new: any(is_event(e, "session.updated", tool_choice="auto") for e in new))

        first = log.mark()
        await speak(worker, pcm24k("What is the capital of France?"))
        await log.until(answered, first)
        first_turn = log.entries[first : log.mark()]

        await choose_tool("required")
        second = log.mark()
        await speak(worker, pcm24k("What is the weather in Paris?"))
        await log.until(lambda new: answered(after_result(new)), second)
        round_trip = log.entries[second:]
        assert receive_loop_alive(llm), "pipecat's receive loop ended"
    finally:
        try:
            await worker.queue_frame(EndFrame())  # graceful: closes the websocket
            try:
                async with asyncio.timeout(10):
                    await asyncio.shield(running)
            except TimeoutError:
                await worker.queue_frame(CancelFrame())
                await asyncio.wait_for(running, 10)
        finally:
            logger.remove(sink)
            with capsys.disabled():
                print("\npipecat event/frame log:\n" + "\n".join(json.dumps(e, default=str) for e in log.entries))
                print(f"counts: {json.dumps(log.counts, sort_keys=True)}")

    assert errors(log.entries) == []
    assert [e for e in log.entries if e["src"] == "log"] == [], "pipecat logged warnings or errors"
    # Each response.done came with the turn's timings, and pipecat took them in its stride.
    ends = [e for e in log.entries if is_event(e, "response.done")]
    assert ends and all("first_token_ms" in e["timings"] for e in ends), ends
    assert_spoken(first_turn)
    # Which city the model names is its own affair; the forced call fits the tool's schema.
    [sent] = [e["arguments"] for e in round_trip if is_event(e, "response.function_call_arguments.done")]
    assert isinstance(json.loads(sent), dict), sent
    assert len(calls) == 1 and calls[0] == json.loads(sent) and isinstance(calls[0]["city"], str), calls
    assert_spoken(after_result(round_trip))  # the answer from the result


async def speak(worker: PipelineWorker, pcm: bytes) -> None:
    """The microphone: 20 ms frames, paced in real time (pacing only, not synchronisation)."""
    pcm += b"\x00" * (-len(pcm) % FRAME_BYTES)
    for offset in range(0, len(pcm), FRAME_BYTES):
        await worker.queue_frame(
            InputAudioRawFrame(audio=pcm[offset : offset + FRAME_BYTES], sample_rate=RATE, num_channels=1)
        )
        await asyncio.sleep(0.02)


def is_event(entry: dict[str, Any], kind: str, **detail: Any) -> bool:
    return entry["src"] == "server" and entry["type"] == kind and all(entry.get(k) == v for k, v in detail.items())


def errors(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Server ``error`` events, ``ErrorFrame`` s and pipecat's ERROR log lines (a dead receive loop)."""
    return [
        e
        for e in entries
        if is_event(e, "error")
        or e["type"] == "ErrorFrame"
        or (e["src"] == "log" and e["type"] in ("ERROR", "CRITICAL"))
    ]


def answered(entries: list[dict[str, Any]]) -> bool:
    """The bot's answer has been spoken and has ended."""
    frames = [e["type"] for e in entries if e["src"] == "frame"]
    return "TTSAudioRawFrame" in frames and "LLMFullResponseEndFrame" in frames[frames.index("TTSAudioRawFrame") :]


def after_result(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kinds = [e["type"] for e in entries]
    return entries[kinds.index("FunctionCallResultFrame") :] if "FunctionCallResultFrame" in kinds else []


def audio_bytes(entries: list[dict[str, Any]]) -> int:
    return sum(e["bytes"] for e in entries if e["type"] == "TTSAudioRawFrame")


def spoken_text(entries: list[dict[str, Any]]) -> str:
    return "".join(e["text"] for e in entries if e["type"] == "TTSTextFrame")


def assert_spoken(entries: list[dict[str, Any]]) -> None:
    """An answer was said (whatever it says) and its words were voiced: PCM16 at 24 kHz."""
    words = len(spoken_text(entries).split())
    seconds = audio_bytes(entries) / (2 * RATE)
    assert words > 0, entries
    assert seconds >= SPOKEN_S_PER_WORD * words, f"{words} words in {seconds:.1f} s of audio"


def receive_loop_alive(llm: OpenAIRealtimeLLMService) -> bool:
    task = llm._receive_task  # pipecat's own task; a validation failure ends it with a log line only
    return task is not None and not task.done()

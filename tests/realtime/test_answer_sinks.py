"""Each output kind alone against a recording outbox: spoken and written answers, calls."""

import asyncio
import base64
import math

from fakes import FakeScope
from rig import Rig

from deployments.realtime.items import AssistantMessage, FunctionCall
from deployments.realtime.response.answer_sinks import SpokenAnswer, WrittenAnswer
from deployments.realtime.response.config import ResponseSettings
from deployments.realtime.response.events import ResponseEvents
from deployments.realtime.response.function_calls import FunctionCalls, finish_call
from deployments.realtime.response.run import ResponseRun
from deployments.realtime.timeline import Timeline
from handlers.audio import REALTIME_RATE
from handlers.tools import FunctionCallArguments, FunctionCallStarted


def announced_run(rig: Rig, spoken_aloud: bool) -> tuple[ResponseRun, ResponseEvents]:
    """A run whose answer is already its first output."""
    prompt: asyncio.Future[list[dict[str, str]]] = asyncio.get_running_loop().create_future()
    run = ResponseRun("resp_1", AssistantMessage("item_answer", spoken_aloud), 0, prompt, Timeline())
    run.outputs.append(run.answer)
    return run, ResponseEvents(rig.outbox, run)


async def test_a_spoken_piece_is_its_transcript_then_its_audio_in_frames() -> None:
    async with Rig(audio_delta_ms=70) as rig:
        rig.stages.tts_chunks, rig.stages.tts_chunk_ms = 2, 300
        run, events = announced_run(rig, spoken_aloud=True)
        sink = SpokenAnswer(run, events, rig.kit, FakeScope("rig").ticket(), ResponseSettings(8, 70, None, None, None))
        rig.send_gate.close()  # nothing is sent yet: nothing counts as sent
        await sink.add("Hello there.")
        await sink.add("Bye.")
        await sink.played()
        assert run.answer.audio_ms == 0 and run.answer.text == "Hello there. Bye."
        rig.send_gate.open()
        sent = await rig.drained()
        sink.stop()
        frames = math.ceil(300 / 70) * 2  # per TTS chunk, a last short frame
        assert [e["type"] for e in sent] == (
            ["response.output_audio_transcript.delta"] + ["response.output_audio.delta"] * frames
        ) * 2
        assert [e["delta"] for e in sent if e["type"].endswith("transcript.delta")] == ["Hello there.", " Bye."]
        audio = b"".join(base64.b64decode(e["delta"]) for e in sent if e["type"] == "response.output_audio.delta")
        assert len(audio) == 2 * 2 * int(REALTIME_RATE * 2 * 0.3)
        assert run.answer.audio_ms == 1200
        assert {(e["item_id"], e["output_index"], e["content_index"]) for e in sent} == {("item_answer", 0, 0)}


async def test_a_written_answer_sends_the_deltas_as_they_come_and_counts_what_was_sent() -> None:
    async with Rig() as rig:
        run, events = announced_run(rig, spoken_aloud=False)
        sink = WrittenAnswer(run, events, rig.outbox)
        assert list(sink.cut("Hi th")) == ["Hi th"] and list(sink.flush(cut_short=False)) == []
        rig.send_gate.close()
        await sink.add("Hi")
        await sink.add(" there")
        assert run.answer.text == "Hi there" and run.answer.sent_chars == 0
        rig.send_gate.open()
        sent = await rig.drained()
        assert [(e["type"], e["delta"]) for e in sent] == [
            ("response.output_text.delta", "Hi"),
            ("response.output_text.delta", " there"),
        ]
        assert run.answer.sent_chars == len("Hi there")


async def test_a_function_call_is_an_output_of_its_own_after_the_answer() -> None:
    async with Rig() as rig:
        run, events = announced_run(rig, spoken_aloud=True)

        def announce(call: FunctionCall) -> None:
            run.outputs.append(call)
            events.output_added(call, None)

        calls = FunctionCalls(run, events, rig.outbox, announce)
        await calls.add(FunctionCallStarted(0, "call_1", "get_weather"))
        await calls.add(FunctionCallArguments(0, '{"city": '))
        await calls.add(FunctionCallArguments(0, '"Paris"}'))
        call = run.outputs[1]
        assert isinstance(call, FunctionCall) and not call.complete and not call.prompted
        finish_call(call, events)
        sent = await rig.drained()
        assert [e["type"] for e in sent] == [
            "conversation.item.added",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
        ]
        assert {e["output_index"] for e in sent if "output_index" in e} == {1}
        assert sent[-1]["arguments"] == '{"city": "Paris"}' and sent[-1]["name"] == "get_weather"
        assert call.complete and call.chat_message()["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'

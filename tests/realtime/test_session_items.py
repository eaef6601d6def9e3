"""What agent frameworks send by default, on fake stages: item retrieve and delete,
``previous_item_id``, ``input_audio`` items, ``semantic_vad`` and the settings served as they
really are, and truncation as clients count it."""

import asyncio
import base64
from typing import Any

import numpy as np
from fakes import FakeStages, Gate, Harness, append_audio, speech

from deployments.realtime.timeline import TIMINGS_KEY
from deployments.realtime.turn_taking.config import SEMANTIC_PAUSE_MS
from handlers.audio import REALTIME_RATE, SPEECH_RATE


def text_item(text: str, item_id: str, role: str = "user") -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


async def test_items_are_retrieved_deleted_and_placed_after_the_item_named() -> None:
    async with Harness() as h:
        h.socket.client_sends(type="conversation.item.create", item=text_item("First.", "item_a"))
        h.socket.client_sends(type="conversation.item.create", item=text_item("Third.", "item_c"))
        h.socket.client_sends(
            type="conversation.item.create", item=text_item("Second.", "item_b"), previous_item_id="item_a"
        )
        h.socket.client_sends(
            type="conversation.item.create", item=text_item("Zeroth.", "item_0"), previous_item_id="root"
        )
        await h.socket.wait_type("conversation.item.done", count=4)
        added = {e["item"]["id"]: e.get("previous_item_id") for e in h.socket.of_type("conversation.item.added")}
        assert added == {"item_a": None, "item_c": "item_a", "item_b": "item_a", "item_0": None}

        h.socket.client_sends(type="conversation.item.retrieve", item_id="item_b")
        retrieved = await h.socket.wait_type("conversation.item.retrieved")
        assert retrieved["item"]["content"][0]["text"] == "Second."

        h.socket.client_sends(type="conversation.item.delete", item_id="item_c")
        assert (await h.socket.wait_type("conversation.item.deleted"))["item_id"] == "item_c"
        h.socket.client_sends(type="response.create")
        await h.socket.wait_type("response.done")
        prompt = [m["content"] for m in h.stages.llm_requests[-1].messages if m["role"] == "user"]
        assert prompt == ["Zeroth.", "First.", "Second."]


async def test_unknown_items_are_refused_and_nothing_changes() -> None:
    async with Harness() as h:
        h.socket.client_sends(type="conversation.item.retrieve", item_id="item_nope")
        h.socket.client_sends(type="conversation.item.delete", item_id="item_nope")
        h.socket.client_sends(type="conversation.item.create", item=text_item("Hi.", "item_x"), previous_item_id="nope")
        h.socket.client_sends(type="conversation.item.create", item=text_item("Hi.", "item_y"))
        h.socket.client_sends(type="conversation.item.create", item=text_item("Again.", "item_y"))
        await h.socket.wait_type("error", count=4)
        errors = [(e["error"]["code"], e["error"]["param"]) for e in h.socket.of_type("error")]
        assert errors == [
            ("item_not_found", "item_id"),
            ("item_not_found", "item_id"),
            ("item_not_found", "previous_item_id"),
            ("invalid_value", "item.id"),
        ]
        assert [(item.id, item.text) for item in h.session._kit.conversation.items] == [("item_y", "Hi.")]
        assert h.stages.stt_calls == []


async def test_an_input_audio_item_is_transcribed_like_speech_and_answered() -> None:
    async with Harness() as h:
        audio = base64.b64encode(speech(1)).decode()
        item = {
            "id": "item_spoken",
            "type": "message",
            "role": "user",
            "content": [{"type": "input_audio", "audio": audio}],
        }
        h.socket.client_sends(type="conversation.item.create", item=item)
        completed = await h.socket.wait_type("conversation.item.input_audio_transcription.completed")
        assert (completed["item_id"], completed["transcript"]) == ("item_spoken", "Question one.")
        assert "input_audio_buffer.committed" not in h.socket.types()
        assert "response.created" not in h.socket.types()  # an item is not a turn: no answer unasked
        h.socket.client_sends(type="response.create")
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "completed"
        assert h.stages.llm_requests[-1].messages[-1] == {"role": "user", "content": "Question one."}


async def test_bad_input_audio_items_are_refused() -> None:
    async with Harness() as h:
        for audio in ("not base64!", base64.b64encode(b"\x00\x00" * 100).decode()):  # the second: 4 ms
            item = {"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": audio}]}
            h.socket.client_sends(type="conversation.item.create", item=item)
        await h.socket.wait_type("error", count=2)
        assert [e["error"]["param"] for e in h.socket.of_type("error")] == ["item.content.audio"] * 2
        assert h.session._kit.conversation.items == ()


async def test_the_agents_sdk_default_session_is_accepted_and_shown_as_served() -> None:
    """The OpenAI Agents SDK's first ``session.update`` (semantic_vad, voice, speed, noise
    reduction, transcription, tracing): one ``session.updated``, no error."""
    sdk_defaults = {
        "type": "realtime",
        "model": "gpt-realtime",
        "instructions": "You are a helpful assistant.",
        "output_modalities": ["audio"],
        "tracing": "auto",
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "noise_reduction": {"type": "near_field"},
                "transcription": {"model": "gpt-4o-mini-transcribe"},
                "turn_detection": {"type": "semantic_vad", "eagerness": "high", "interrupt_response": True},
            },
            "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "ash", "speed": 1.2},
        },
    }
    async with Harness() as h:
        h.socket.client_sends(type="session.update", session=sdk_defaults)
        updated = (await h.socket.wait_type("session.updated"))["session"]
        assert h.socket.of_type("error") == []
        turn = updated["audio"]["input"]["turn_detection"]
        assert (turn["type"], turn["eagerness"], turn["interrupt_response"]) == ("semantic_vad", "high", True)
        assert updated["audio"]["output"]["speed"] == 1.0  # what is served, not what was asked
        assert updated["audio"]["input"]["noise_reduction"] == {"type": "near_field"}  # applied
        assert h.session.settings.turn_detection.silence_duration_ms == SEMANTIC_PAUSE_MS  # then Smart Turn
        h.socket.client_sends(
            type="session.update",
            session={
                "type": "realtime",
                "audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}}},
            },
        )
        updated = (await h.socket.wait_type("session.updated", count=2))["session"]
        assert updated["audio"]["input"]["turn_detection"]["eagerness"] == "low"


async def test_truncation_past_the_audio_sent_is_clamped_never_refused() -> None:
    """Clients count what they received and round up (the Agents SDK sends the ceiling):
    past the audio sent means the whole answer was heard."""
    stages = FakeStages()
    stages.answer = ["Short."]
    stages.tts_chunk_ms = 300
    async with Harness(stages) as h:
        h.socket.client_sends(type="response.create")
        done = await h.socket.wait_type("response.done")
        item_id = done["response"]["output"][0]["id"]
        for audio_end_ms in (301, 5000):
            h.socket.client_sends(
                type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=audio_end_ms
            )
        await h.socket.wait_type("conversation.item.truncated", count=2)
        assert [e["audio_end_ms"] for e in h.socket.of_type("conversation.item.truncated")] == [300, 300]
        assert h.socket.of_type("error") == []
        assert h.session._kit.conversation.find(item_id).text == "Short."


async def test_a_text_session_writes_its_answers_without_tts() -> None:
    async with Harness() as h:
        h.socket.client_sends(type="session.update", session={"type": "realtime", "output_modalities": ["text"]})
        assert (await h.socket.wait_type("session.updated"))["session"]["output_modalities"] == ["text"]
        h.socket.client_sends(type="response.create")
        done = await h.socket.wait_type("response.done")
        deltas = [e["delta"] for e in h.socket.of_type("response.output_text.delta")]
        assert "".join(deltas) == "The answer is one. That is all."
        assert h.socket.of_type("response.output_text.done")[0]["text"] == "The answer is one. That is all."
        assert h.stages.tts_streams == [] and h.socket.of_type("response.output_audio.delta") == []
        assert done["response"]["output_modalities"] == ["text"]
        assert done["response"]["output"][0]["content"][0] == {
            "type": "output_text",
            "text": "The answer is one. That is all.",
        }
        item_id = done["response"]["output"][0]["id"]
        h.socket.client_sends(type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=0)
        assert (await h.socket.wait_type("error"))["error"]["param"] == "item_id"  # no audio to cut
        assert h.session._kit.conversation.find(item_id).text == "The answer is one. That is all."


async def test_sessions_on_the_same_stages_keep_whole_answers_when_a_text_answer_is_cancelled() -> None:
    """A spoken and a written answer come out whole beside a written one cancelled mid-stream;
    the cancelled one keeps the text it sent (a text answer has no audio to cut it to)."""
    stages = FakeStages()
    stages.answer = [f"Part {i} of the answer. " for i in range(6)]
    whole = "".join(stages.answer)
    text_only = {"type": "realtime", "output_modalities": ["text"]}
    async with Harness(stages, "a") as a, Harness(stages, "b") as b, Harness(stages, "c") as c:
        for h in (b, c):
            h.socket.client_sends(type="session.update", session=text_only)
            await h.socket.wait_type("session.updated")
        b_llm = stages.session_llm_gates["b"] = Gate()
        b_llm.close(after=1)  # b's first delta is written, then its LLM stalls
        for h in (a, b, c):
            h.socket.client_sends(type="response.create")
        await b.socket.wait_type("response.output_text.delta")
        b.socket.client_sends(type="response.cancel")
        results = [await h.socket.wait_type("response.done") for h in (a, b, c)]
        assert [r["response"]["status"] for r in results] == ["completed", "cancelled", "completed"]
        assert results[0]["response"]["output"][0]["content"][0]["transcript"] == whole.strip()
        assert results[2]["response"]["output"][0]["content"][0]["text"] == whole
        assert results[1]["response"]["output"][0]["content"][0]["text"] == "Part 0 of the answer. "
        assert b.socket.of_type("response.output_text.done") == []
        assert stages.live_streams() == []


async def test_a_response_takes_its_own_modalities_instructions_tokens_and_metadata() -> None:
    async with Harness() as h:
        asked = {
            "output_modalities": ["text"],
            "instructions": "Answer in French.",
            "max_output_tokens": 7,
            "metadata": {"topic": "weather"},
        }
        h.socket.client_sends(type="response.create", response=asked)
        done = await h.socket.wait_type("response.done")
        request = h.stages.llm_requests[-1]
        assert request.messages[0] == {"role": "system", "content": "Answer in French."}
        assert request.max_tokens == 7
        metadata = done["response"]["metadata"]  # the client's, and the turn's timings beside it
        assert metadata.pop(TIMINGS_KEY) and metadata == {"topic": "weather"}
        assert h.socket.of_type("response.created")[0]["response"]["metadata"] == {"topic": "weather"}
        assert h.stages.tts_streams == []
        h.socket.client_sends(type="response.create")  # the next one is the session's again
        await h.socket.wait_type("response.done", count=2)
        assert h.stages.llm_requests[-1].max_tokens is None and h.stages.tts_streams != []


async def test_an_out_of_band_response_answers_its_input_and_leaves_the_conversation_alone() -> None:
    async with Harness() as h:
        h.socket.client_sends(type="conversation.item.create", item=text_item("In the conversation.", "item_a"))
        await h.socket.wait_type("conversation.item.done")
        asked = {
            "conversation": "none",
            "input": [text_item("Classify this.", "item_oob")],
            "output_modalities": ["text"],
        }
        h.socket.client_sends(type="response.create", response=asked)
        done = await h.socket.wait_type("response.done")
        assert [m["content"] for m in h.stages.llm_requests[-1].messages] == ["Classify this."]
        assert done["response"]["conversation_id"] == "none"
        assert [item.id for item in h.session._kit.conversation.items] == ["item_a"]
        assert len(h.socket.of_type("conversation.item.added")) == 1  # only the client's own item


async def test_bad_response_options_are_refused_and_nothing_starts() -> None:
    async with Harness() as h:
        for asked, _ in BAD_RESPONSES:
            h.socket.client_sends(type="response.create", response=asked)
        await h.socket.wait_type("error", count=len(BAD_RESPONSES))
        assert [e["error"]["param"] for e in h.socket.of_type("error")] == [param for _, param in BAD_RESPONSES]
        assert h.stages.llm_requests == [] and "response.created" not in h.socket.types()


BAD_RESPONSES: list[tuple[dict[str, Any], str]] = [
    ({"output_modalities": ["audio", "text"]}, "response.output_modalities"),
    ({"max_output_tokens": 0}, "response.max_output_tokens"),
    ({"conversation": "conv_123"}, "response.conversation"),
    ({"instructions": "x" * 5000}, "response.instructions"),
    (
        {"input": [{"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": "AAAA"}]}]},
        "response.input[0].content",
    ),
    ({"tools": [{"type": "function", "name": "bad name!"}]}, "response.tools[0].name"),
    ({"tool_choice": {"type": "function", "name": "get_weather"}}, "response.tool_choice"),
]


async def test_silence_after_an_answer_has_played_prompts_a_response_when_idle_timeout_is_set() -> None:
    async with Harness() as h:
        turn = {"type": "server_vad", "idle_timeout_ms": 5000}
        h.socket.client_sends(
            type="session.update", session={"type": "realtime", "audio": {"input": {"turn_detection": turn}}}
        )
        updated = await h.socket.wait_type("session.updated")
        assert updated["session"]["audio"]["input"]["turn_detection"]["idle_timeout_ms"] == 5000
        h.socket.client_sends(type="response.create")
        await h.socket.wait_type("response.done")
        append_audio(h.socket, bytes(REALTIME_RATE * 2 * 8))  # 8 s of silence from the microphone
        # 5 s after the answer's 0.9 s of audio has played: the fake stages answer at once
        timeout = await h.socket.wait_type("input_audio_buffer.timeout_triggered", timeout_s=10)
        assert timeout["audio_end_ms"] - timeout["audio_start_ms"] >= 5000
        committed = await h.socket.wait_type("input_audio_buffer.committed")
        assert committed["item_id"] == timeout["item_id"]
        done = await h.socket.wait_type("response.done", count=2)
        assert done["response"]["status"] == "completed"
        assert [i.id for i in h.session._kit.conversation.items][-2] == timeout["item_id"]
        assert h.socket.of_type("error") == []


async def test_the_growing_utterance_is_transcribed_while_the_user_speaks() -> None:
    words = ["What", "is", "the", "weather", "like", "in", "Paris", "today"]

    def transcript_of(audio: np.ndarray) -> str:  # a word per 0.2 s of tone heard
        return " ".join(words[: max(1, min(len(words), int(len(audio) / SPEECH_RATE / 0.2)))]) + "."

    async with Harness(partial_transcript_interval_s=0.3) as h:
        h.stages.transcript_of = transcript_of
        pcm, frame = speech(seconds=1.6), REALTIME_RATE * 2 // 10
        for offset in range(0, len(pcm), frame):  # a live microphone: 100 ms a frame
            append_audio(h.socket, pcm[offset : offset + frame])
            await asyncio.sleep(0.1)
        completed = await h.socket.wait_type("conversation.item.input_audio_transcription.completed")
        deltas = h.socket.of_type("conversation.item.input_audio_transcription.delta")
        assert len(deltas) >= 3 and {d["item_id"] for d in deltas} == {completed["item_id"]}
        assert "".join(d["delta"] for d in deltas) == completed["transcript"]
        stopped = h.socket.types().index("input_audio_buffer.speech_stopped")
        assert h.socket.types().index("conversation.item.input_audio_transcription.delta") < stopped
        assert all(d["delta"].endswith(" ") for d in deltas[:-1]), "partials send whole words"

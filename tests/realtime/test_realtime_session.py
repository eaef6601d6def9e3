"""The session's logic on fake stages: no Ray, no models, each defect of the review pinned.

Every test here drives a real ``RealtimeSession`` through a fake socket; the stages are
gated so that the test decides where each one is when the client acts.
"""

import asyncio
import base64

from fakes import FakeStages, Gate, Harness, append_audio, speech, spoken_ms


async def settle() -> None:
    """Let every ready task run until none is (the fakes never sleep)."""
    for _ in range(50):
        await asyncio.sleep(0)


async def test_spoken_turn_gets_a_spoken_answer() -> None:
    async with Harness() as h:
        append_audio(h.socket, speech(1))
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "completed"
        types = h.socket.types()
        assert types.index("input_audio_buffer.speech_stopped") < types.index("response.created")
        assert done["response"]["output"][0]["content"][0]["transcript"] == "The answer is one. That is all."
        assert h.stages.llm_requests[-1].messages[-1] == {"role": "user", "content": "Question one."}
        assert len(h.stages.stt_calls) == 1, "the pause's transcript is reused for the turn"


async def test_held_answer_is_adopted_without_a_second_llm_call() -> None:
    """Started in the pause, shown only once the turn ended, never answered twice."""
    async with Harness() as h:
        append_audio(h.socket, speech(1))
        await h.socket.wait_type("response.done")
        assert len(h.stages.llm_requests) == 1
        created = h.socket.types().index("response.created")
        assert h.socket.types().index("input_audio_buffer.committed") < created


async def test_held_answer_to_a_changed_conversation_is_answered_afresh() -> None:
    """A text item added during the pause: the held answer no longer answers the
    conversation, so it is dropped unseen and a fresh one answers."""
    async with Harness() as h:
        pcm = speech(1, silence_s=1.0)
        pause_at = len(speech(1, silence_s=0.2))
        append_audio(h.socket, pcm[:pause_at])
        for _ in range(100):
            if h.stages.llm_requests:
                break
            await settle()
        assert len(h.stages.llm_requests) == 1, "the held answer started in the pause"
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Be brief."}]}
        h.socket.client_sends(type="conversation.item.create", item=item)
        append_audio(h.socket, pcm[pause_at:])
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "completed"
        assert len(h.socket.of_type("response.created")) == 1
        assert len(h.stages.llm_requests) == 2 and h.stages.llm_streams[0].cancelled
        assert {"role": "user", "content": "Be brief."} in h.stages.llm_requests[1].messages


async def test_the_llm_computes_the_conversation_while_the_user_speaks() -> None:
    """The next prompt starts with the conversation so far: its prefill starts at speech start."""
    async with Harness() as h:
        append_audio(h.socket, speech(1))
        await h.socket.wait_type("response.done")
        append_audio(h.socket, speech(2))
        await h.socket.wait_type("response.done", count=2)
        assert h.stages.prefills[-1] == [
            {"role": "user", "content": "Question one."},
            {"role": "assistant", "content": "The answer is one. That is all."},
        ]
        assert h.stages.llm_requests[-1].messages[:2] == h.stages.prefills[-1]


async def test_resumed_speech_drops_the_held_answer_unseen() -> None:
    async with Harness() as h:
        h.stages.llm_gate.close()
        pcm = speech(1, silence_s=0.3) + speech(1, silence_s=1.0)  # a pause shorter than the 500 ms turn end
        append_audio(h.socket, pcm)
        await h.socket.wait_type("input_audio_buffer.speech_stopped")
        h.stages.llm_gate.open()
        await h.socket.wait_type("response.done")
        assert len(h.socket.of_type("response.created")) == 1
        assert len(h.socket.of_type("response.done")) == 1
        assert h.stages.llm_streams[0].cancelled, "the first held answer's LLM stream was stopped"


async def test_cancel_while_tts_lags_leaves_no_task_or_stream_behind() -> None:
    """Review D1: a long answer, a fast LLM and a slow TTS; a cancel must not leave a chunk
    producer blocked on a full hand-off."""
    stages = FakeStages()
    stages.answer = [f"Sentence number {i} is here. " for i in range(40)]
    async with Harness(stages) as h:
        baseline = len(asyncio.all_tasks())
        h.stages.tts_gate.close()
        h.socket.client_sends(type="response.create")
        await settle()
        assert h.stages.tts_streams, "the first piece is with TTS"
        h.socket.client_sends(type="response.cancel")
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "cancelled"
        await settle()
        assert len(asyncio.all_tasks()) == baseline
        assert len(h.socket.of_type("response.done")) == 1 and not h.socket.of_type("error")
        assert h.stages.live_streams() == []


async def test_a_crashed_loop_closes_the_socket_with_1011_and_releases_everything() -> None:
    """Review D2: never a live socket with a dead loop."""
    async with Harness() as h:
        h.socket.client_sends(type="response.create")
        h.stages.tts_gate.close()
        await settle()
        h.stages.fail_transcribe = TypeError("a bug in turn-taking")
        append_audio(h.socket, speech(1))
        async with asyncio.timeout(5):
            await h.task
        assert h.socket.closed is not None and h.socket.closed[0] == 1011
        assert h.socket.sent[-1]["type"] == "error"
        assert h.socket.sent[-1]["error"]["code"] == "session_failed"
        assert h.stages.live_streams() == [], "the response in flight was stopped"
        assert h.scope.generation == 1, "workers were told the response is stale"


async def test_create_and_cancel_in_one_burst_give_created_then_done() -> None:
    """Review D4: the cancel comes before the response's task first runs."""
    async with Harness() as h:
        h.socket.client_sends(type="response.create")
        h.socket.client_sends(type="response.cancel")
        done = await h.socket.wait_type("response.done")
        created = h.socket.of_type("response.created")
        assert created and created[0]["response"]["id"] == done["response"]["id"]
        assert h.socket.types().index("response.created") < h.socket.types().index("response.done")
        assert done["response"]["status"] == "cancelled"
        assert not h.socket.of_type("error")


async def test_cancelling_b_keeps_all_of_a_earlier_response() -> None:
    """Review D5: A finished but its output still queued behind a slow client; cancelling
    B drops B's output only."""
    async with Harness(outgoing_events=10_000) as h:
        h.socket.send_gate.close()
        h.socket.client_sends(type="response.create")
        await settle()
        h.stages.tts_chunks = 2
        h.stages.tts_gate.close(after=1)  # B sends one chunk of audio, then its TTS stalls
        h.socket.client_sends(type="response.create")
        await settle()
        h.socket.client_sends(type="response.cancel")
        await settle()
        h.socket.send_gate.open()
        done = await h.socket.wait_type("response.done", count=2)
        first, second = h.socket.of_type("response.done")
        assert (first["response"]["status"], second["response"]["status"]) == ("completed", "cancelled")
        assert len(h.socket.of_type("response.output_audio.delta", first["response"]["id"])) == 3 * 3, "3 x 300 ms"
        assert not h.socket.of_type("response.output_audio.delta", done["response"]["id"])


async def test_truncate_inside_audio_cut_by_a_cancel() -> None:
    """Review D3: the audio sent of a piece a cancel cut counts, for truncation and history."""
    stages = FakeStages()
    stages.answer = ["One two three four five six. "]
    stages.tts_chunks = 2
    async with Harness(stages) as h:
        h.stages.tts_gate.close(after=1)  # the piece's second chunk never comes
        h.socket.client_sends(type="response.create")
        first = await h.socket.wait_type("response.output_audio.delta")
        await settle()
        h.socket.client_sends(type="response.cancel")
        done = await h.socket.wait_type("response.done")
        sent_ms = sum(spoken_ms(base64.b64decode(e["delta"])) for e in h.socket.of_type("response.output_audio.delta"))
        assert sent_ms == 300
        assert done["response"]["output"][0]["content"][0]["transcript"] == "One two three", "the piece cut"
        truncate = {"item_id": first["item_id"], "content_index": 0, "audio_end_ms": 150}
        h.socket.client_sends(type="conversation.item.truncate", **truncate)
        truncated = await h.socket.wait_type("conversation.item.truncated")
        assert truncated["audio_end_ms"] == 150
        assert not h.socket.of_type("error")


async def test_vad_keeps_listening_while_stt_is_slow() -> None:
    """Review D6: a barge-in right after a turn is heard while that turn's STT is pending."""
    async with Harness() as h:
        h.stages.stt_gate.close()
        append_audio(h.socket, speech(1, silence_s=0.8) + speech(2))
        second_start = await h.socket.wait_type("input_audio_buffer.speech_started", count=2)
        assert second_start
        assert not h.socket.of_type("response.created"), "the first turn's transcript is still pending"
        h.stages.stt_gate.open()
        await h.socket.wait_type("response.done")


async def test_barge_in_stops_the_answer_and_announces_in_order() -> None:
    async with Harness() as h:
        h.stages.tts_gate.close()
        append_audio(h.socket, speech(1))
        await h.socket.wait_type("response.created")
        append_audio(h.socket, speech(2, silence_s=0.2))
        started = await h.socket.wait_type("input_audio_buffer.speech_started", count=2)
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "cancelled"
        assert done["response"]["status_details"]["reason"] == "turn_detected"
        types = h.socket.types()
        assert types.index("response.done") > h.socket.sent.index(started)


async def test_a_failed_stage_fails_the_response_visibly_and_the_session_goes_on() -> None:
    stages = FakeStages()
    async with Harness(stages) as h:
        stages.answer = []
        original = stages.synthesize

        def broken(request):  # type: ignore[no-untyped-def]
            raise ConnectionError("replica gone")

        stages.answer = ["Hello there."]
        stages.synthesize = broken  # type: ignore[method-assign]
        h.socket.client_sends(type="response.create")
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "failed"
        error = h.socket.of_type("error")[0]["error"]
        assert (error["type"], error["code"]) == ("server_error", "response_failed")
        assert "replica" not in error["message"]
        stages.synthesize = original  # type: ignore[method-assign]
        h.socket.client_sends(type="response.create")
        assert (await h.socket.wait_type("response.done", count=2))["response"]["status"] == "completed"


async def test_bad_events_get_an_error_and_the_session_goes_on() -> None:
    async with Harness() as h:
        h.socket.client_sends(type="no.such.event")
        h.socket.client_sends(type="output_audio_buffer.clear")
        audio = {"input": {"turn_detection": {"type": "server_vad", "threshold": 5}}}
        h.socket.client_sends(type="session.update", session={"type": "realtime", "audio": audio})
        h.socket.client_sends(type="response.cancel")
        await h.socket.wait_type("error", count=4)
        codes = [e["error"]["code"] for e in h.socket.of_type("error")]
        assert codes == ["invalid_event", "unsupported_event", "invalid_value", "response_cancel_not_active"]
        h.socket.client_sends(type="response.create")
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "completed"


async def test_sessions_on_the_same_stages_are_isolated_when_one_is_interrupted() -> None:
    """Three sessions share the stages (as they share replicas); one is cancelled mid-answer."""
    stages = FakeStages()
    stages.answer = [f"Part {i} of the answer. " for i in range(6)]
    async with Harness(stages, "a") as a, Harness(stages, "b") as b, Harness(stages, "c") as c:
        b_tts = stages.session_tts_gates["b"] = Gate()
        b_tts.close(after=1)  # b's first piece is spoken, then its TTS stalls
        for h in (a, b, c):
            h.socket.client_sends(type="response.create")
        await b.socket.wait_type("response.output_audio.delta")
        b.socket.client_sends(type="response.cancel")
        results = [await h.socket.wait_type("response.done") for h in (a, b, c)]
        assert [r["response"]["status"] for r in results] == ["completed", "cancelled", "completed"]
        for h, r in ((a, results[0]), (c, results[2])):
            transcript = r["response"]["output"][0]["content"][0]["transcript"]
            assert transcript == " ".join(f"Part {i} of the answer." for i in range(6))
            pieces = len(h.socket.of_type("response.output_audio_transcript.delta"))
            assert len(h.socket.of_type("response.output_audio.delta")) == 3 * pieces, "300 ms per piece"
        assert a.scope.generation == c.scope.generation == 0 and b.scope.generation == 1

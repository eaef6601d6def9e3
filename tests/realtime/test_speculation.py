"""Held answers alone: a ``Speculator`` on fake stages and a list-backed outbox."""

import asyncio

import numpy as np
from fakes import FakeStages, Gate, Harness, append_audio, speech
from rig import Rig

from deployments.realtime.conversation import prompt
from deployments.realtime.items import UserAudio
from deployments.realtime.timeline import Timeline
from deployments.realtime.turn_taking.speculation import Speculator
from handlers.audio import SPEECH_RATE

UTTERANCE = np.zeros(SPEECH_RATE, np.float32)
END = len(UTTERANCE)


def speculator(rig: Rig) -> Speculator:
    return Speculator(rig.kit, rig.responder)


async def turn_ends(rig: Rig, speculation_transcript: "asyncio.Future[str]", final_text: str | None = None) -> None:
    """The turn's utterance joins the conversation, transcribed as the speculation heard it
    (or as ``final_text``, a transcript that changed)."""
    item = UserAudio("item_user")
    rig.conversation.add(item)
    item.heard(await speculation_transcript if final_text is None else final_text)


async def test_pause_then_resume_sends_nothing_and_stops_the_held_answer() -> None:
    async with Rig() as rig:
        rig.stages.llm_gate.close()
        speculation = speculator(rig)
        speculation.pause(END, UTTERANCE, None, "item_user")
        await rig.stages.until(lambda: bool(rig.stages.llm_streams))  # the held run reached the LLM
        speculation.drop("speech_resumed")
        assert await rig.drained() == []
        assert rig.stages.llm_streams[0].cancelled
        assert rig.responder.current is None


async def test_pause_then_the_same_turn_releases_the_held_events_in_order_with_one_llm_call() -> None:
    async with Rig() as rig:
        speculation = speculator(rig)
        speculation.pause(END, UTTERANCE, None, "item_user")
        taken = speculation.take(END)
        assert taken is not None and taken.run is not None
        await taken.run.task  # the held answer runs to its end, unseen
        assert await rig.drained() == []
        await turn_ends(rig, taken.transcript)
        speculation.answer_turn(prompt(rig.conversation.items, None), Timeline(), taken.run, "item_user")
        done = await rig.wait_type("response.done")
        types = rig.types()
        assert types[:4] == [
            "response.created",
            "conversation.item.added",
            "response.output_item.added",
            "response.content_part.added",
        ]
        assert types.index("response.output_audio.delta") < types.index("response.done")
        events = rig.events()
        assert events[1]["previous_item_id"] == "item_user"
        assert {e.get("response_id", done["response"]["id"]) for e in events} == {done["response"]["id"]}
        assert done["response"]["status"] == "completed"
        assert len(rig.stages.llm_requests) == 1
        assert [item.id for item in rig.conversation.items] == ["item_user", taken.run.answer.id]


async def test_a_changed_transcript_gets_a_fresh_answer_and_the_held_one_is_cancelled() -> None:
    async with Rig() as rig:
        rig.stages.llm_gate.close(after=1)  # the held answer stops after its first delta
        speculation = speculator(rig)
        speculation.pause(END, UTTERANCE, None, "item_user")
        taken = speculation.take(END)
        assert taken is not None and taken.run is not None
        await turn_ends(rig, taken.transcript, final_text="Question two.")
        speculation.answer_turn(prompt(rig.conversation.items, None), Timeline(), taken.run, "item_user")
        await rig.stages.until(lambda: len(rig.stages.llm_requests) == 2)
        assert rig.stages.llm_streams[0].cancelled, "the held answer is stopped on its replica"
        rig.stages.llm_gate.open()
        done = await rig.wait_type("response.done")
        assert rig.types().count("response.created") == 1
        assert done["response"]["id"] != taken.run.id
        assert rig.stages.llm_requests[1].messages[-1] == {"role": "user", "content": "Question two."}


async def test_a_barge_in_before_the_transcript_cancels_the_answer_but_not_the_transcript() -> None:
    """The answer to a turn waits on the turn's STT call, which the item waits on too: the
    answer's cancel (the next turn's speech) must not cancel the item's transcript."""
    async with Harness() as h:
        h.stages.stt_gate.close()
        append_audio(h.socket, speech(1))
        first = await h.socket.wait_type("input_audio_buffer.committed")
        append_audio(h.socket, speech(2))
        await h.socket.wait_type("input_audio_buffer.committed", count=2)
        h.stages.stt_gate.open()
        await h.socket.wait_type("conversation.item.input_audio_transcription.completed", count=2)
        heard = h.socket.of_type("conversation.item.input_audio_transcription.completed")
        assert first["item_id"] in {event["item_id"] for event in heard}
        assert h.socket.of_type("conversation.item.input_audio_transcription.failed") == []


async def test_a_cancelled_prompt_leaves_its_items_to_be_transcribed() -> None:
    """A fresh answer's prompt waits on the turn's item: its cancel must not cancel the
    item's own future, which the transcript then fills."""
    item = UserAudio("item_user")
    waiting = asyncio.ensure_future(prompt([item], None))
    await asyncio.sleep(0)  # the prompt is waiting on the item
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    item.heard("What is the capital of France?")
    assert await prompt([item], None) == [{"role": "user", "content": "What is the capital of France?"}]


async def test_a_held_answer_dropped_as_its_audio_arrives_sends_nothing_while_other_sessions_answer() -> None:
    """Issue 39: speech resumes (the held answer is dropped) in the very turn of the event loop
    its first TTS audio arrives, after the responder handed the audio to its playout task and
    before that task sent it. Two other sessions are answered through the same (fake)
    replicas meanwhile. The dropped answer's session gets nothing of it, ever (its audio went
    out as answer audio of a response never created: 20 deltas a sentence), and the others
    get their own answers whole."""
    stages = FakeStages()
    stages.tts_chunks, stages.tts_chunk_ms = 2, 2000  # 20 frames a chunk: the playout's read-ahead
    async with Rig(stages, name="paused") as paused, Rig(stages, name="one") as one, Rig(stages, name="two") as two:
        stages.session_tts_gates["paused"] = held_tts = Gate()
        held_tts.close()
        speculation = speculator(paused)
        stages.tts_given["paused"] = lambda: speculation.drop("speech_resumed")  # as the audio arrives
        speculation.pause(END, UTTERANCE, None, "item_user")
        question = [{"role": "user", "content": "Hi."}]
        runs = [rig.responder.answer(asyncio.sleep(0, question), Timeline()) for rig in (one, two)]
        await stages.until(lambda: bool(stages.tts_streams))  # the held answer's TTS waits
        held_tts.open()
        held_tts.close()  # one chunk passes
        await stages.until(lambda: stages.tts_streams[0].cancelled)
        assert speculation.active is False and paused.responder.current is None
        assert await paused.drained() == [], "nothing of a response the client never saw created"
        for rig, run in zip((one, two), runs, strict=True):
            done = await rig.wait_type("response.done")
            assert done["response"]["id"] == run.id and done["response"]["status"] == "completed"
            events = rig.events()
            assert {event.get("response_id", run.id) for event in events} == {run.id}
            assert events[0]["type"] == "response.created"
            sent_ms = 100 * rig.types().count("response.output_audio.delta")
            assert sent_ms == run.answer.audio_ms == run.answer.spoken_ms >= 2 * 2000, "the whole answer"


async def test_a_held_answer_that_ended_before_it_was_dropped_leaves_nothing_behind() -> None:
    """The outbox forgets a dropped response once nothing more of it can come: a long
    session's dropped answers do not pile up."""
    async with Rig() as rig:
        speculation = speculator(rig)
        speculation.pause(END, UTTERANCE, None, "item_user")
        taken = speculation.take(END)
        assert taken is not None and taken.run is not None and taken.run.task is not None
        await taken.run.task  # it ran to its end, unseen
        rig.responder.abandon(taken.run, "replaced")
        assert await rig.drained() == []
        assert not rig.outbox.holds(taken.run.id)
        assert taken.run.id not in rig.outbox._unseen

"""Turn-taking's parts alone: partial transcripts and the idle timeout."""

import asyncio

import numpy as np
from openai.types.realtime import InputAudioBufferClearedEvent
from rig import Rig

from deployments.realtime.items import InputText
from deployments.realtime.protocol import server_event
from deployments.realtime.timeline import Timeline
from deployments.realtime.turn_taking.idle import IdleTimeout
from deployments.realtime.turn_taking.partials import PartialTranscripts
from deployments.realtime.turn_taking.transcription import Transcription
from handlers.audio import SPEECH_RATE

DELTA = "conversation.item.input_audio_transcription.delta"


async def test_partial_transcripts_only_extend_what_was_sent_and_rest_in_a_pause() -> None:
    heard = iter(["Hello", "Hello there my", "Goodbye all of you", "Hello there my friend how", "Hello there my x"])
    async with Rig() as rig:
        rig.stages.transcript_of = lambda audio: next(heard, "Hello there my friend how are")
        paused = False
        partials = PartialTranscripts(
            rig.kit, 0.01, speech_so_far=lambda: np.zeros(SPEECH_RATE, np.float32), paused=lambda: paused
        )
        partials.start("item_u")
        await rig.wait_for(lambda e: e.get("delta") == "how ")
        deltas = [e["delta"] for e in rig.events() if e["type"] == DELTA]
        assert deltas == ["Hello there ", "my friend ", "how "], "whole words, never taking any back"
        paused = True
        calls = len(rig.stages.stt_calls)
        await asyncio.sleep(0.1)  # ten intervals of a pause
        assert len(rig.stages.stt_calls) <= calls + 1, "no transcription in a pause (one may be under way)"
        partials.stop()
        assert partials.take("item_u") == "Hello there my friend how "
        assert partials.take("item_u") == ""


def idle_rig(rig: Rig) -> IdleTimeout:
    rig.settings.idle_timeout_ms = 50
    rig.stages.tts_chunk_ms = 10
    transcription = Transcription(rig.kit, partial_text=lambda item_id: "")
    return IdleTimeout(rig.kit, rig.responder, transcription, received_ms=lambda: 1000, user_speaking=lambda: False)


async def test_the_idle_timeout_commits_the_silence_once_and_answers_it() -> None:
    async with Rig() as rig:
        idle_rig(rig)
        rig.conversation.add(InputText("item_q", "Hi."))
        rig.responder.answer(asyncio.sleep(0, [{"role": "user", "content": "Hi."}]), Timeline())
        await rig.wait_for(lambda e: e["type"] == "response.done" and rig.types().count("response.done") == 2)
        types = rig.types()
        timeout_at = types.index("input_audio_buffer.timeout_triggered")
        assert types[timeout_at : timeout_at + 4] == [
            "input_audio_buffer.timeout_triggered",
            "input_audio_buffer.committed",
            "conversation.item.added",
            "conversation.item.done",
        ]
        silence_id = rig.events()[timeout_at]["item_id"]
        about_silence = [
            e["type"] for e in rig.events() if silence_id in (e.get("item_id"), e.get("item", {}).get("id"))
        ]
        assert about_silence == types[timeout_at : timeout_at + 4], "each exactly once"
        assert types[timeout_at + 4] == "response.created", "the silence is answered"
        silence = rig.conversation.items[2]
        assert silence.id == silence_id and silence.chat_message()["content"] == ""


async def test_speech_stops_the_idle_timer() -> None:
    async with Rig() as rig:
        idle = idle_rig(rig)
        ended = asyncio.Event()
        rig.responder.on_end(lambda run: ended.set())
        rig.responder.answer(asyncio.sleep(0, [{"role": "user", "content": "Hi."}]), Timeline())
        await ended.wait()
        idle.stop()  # the user started speaking
        await asyncio.sleep(0.3)  # past the answer's audio and the timeout
        rig.outbox.put(server_event(InputAudioBufferClearedEvent))
        assert "input_audio_buffer.timeout_triggered" not in [e["type"] for e in await rig.drained()]

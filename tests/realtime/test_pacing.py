"""A WebSocket answer paced a lead ahead of the listener (``Playback.room``), on fake stages.

A client plays what it is sent, so pacing is what lets a candidate interruption pause the
sound within the lead, and what keeps a backchannel from costing any of the answer.
"""

import asyncio
import base64

import numpy as np
import pytest
from fakes import FakeSocket, FakeStages, Harness, append_audio, speech

from deployments.realtime.playback import MAX_PAUSE_S
from deployments.realtime.turn_taking.config import InterruptionRules
from handlers.audio import REALTIME_RATE
from handlers.synthetic import ToneTranscriber
from loadtest.client import listener

LEAD_MS = 200
PACED = InterruptionRules(audio_lead_ms=LEAD_MS)
BACKCHANNEL, QUESTION = 3, 2
"""Tone 3 is heard as "Mm-hmm."; tone 2 as "Question two." (a real interruption)."""
SLOP_MS = 30
"""Event-loop latency allowed on top of the lead."""


def answer_stages(pieces_ms: int = 1000, pieces: int = 2) -> FakeStages:
    """Answers of ``pieces`` TTS chunks of ``pieces_ms`` per sentence (three sentences),
    all made at once; the STT hears tone 3 as a hum."""
    stages = FakeStages()
    stages.tts_chunk_ms, stages.tts_chunks = pieces_ms, pieces
    stages.transcript_of = lambda audio: "Mm-hmm." if (t := ToneTranscriber().transcribe(audio)) == "Question 3." else t
    return stages


def audio_ms(socket: FakeSocket, response_id: str | None = None) -> float:
    return sum(
        len(base64.b64decode(e["delta"])) * 1000 / (2 * REALTIME_RATE)
        for e in socket.of_type("response.output_audio.delta", response_id)
    )


def most_ahead_ms(socket: FakeSocket) -> float:
    """How far ahead of a client playing from the first delta on the audio ever was."""
    return listener.most_ahead_ms(
        [
            (at, len(base64.b64decode(e["delta"])) / (2 * REALTIME_RATE))
            for e, at in zip(socket.sent, socket.sent_at, strict=True)
            if e["type"] == "response.output_audio.delta"
        ]
    )


@pytest.mark.parametrize("lead_ms", [LEAD_MS, None])
async def test_a_paced_answer_is_sent_at_most_its_lead_ahead_and_whole(lead_ms: int | None) -> None:
    stages = answer_stages(pieces_ms=300)
    async with Harness(stages, interruption=InterruptionRules(audio_lead_ms=lead_ms)) as h:
        append_audio(h.socket, speech(1))
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "completed"
        assert audio_ms(h.socket) == 3 * 2 * 300, "every frame of the answer was sent"
        if lead_ms is None:
            assert most_ahead_ms(h.socket) > 1000, "unpaced: the answer goes out as made"
        else:
            assert most_ahead_ms(h.socket) <= lead_ms + SLOP_MS


async def test_a_candidate_stops_the_paced_send_and_a_backchannel_resumes_it_losing_nothing() -> None:
    async with Harness(answer_stages(pieces_ms=500), interruption=PACED) as h:
        append_audio(h.socket, speech(1))
        await h.socket.wait_type("response.output_audio.delta")
        h.stages.stt_gate.close()  # the candidate's words stay undecided
        append_audio(h.socket, speech(BACKCHANNEL, seconds=0.6))
        await h.stages.until(lambda: len(h.stages.stt_calls) >= 2)
        sent_at_pause = audio_ms(h.socket)
        await asyncio.sleep(0.6)  # a window to see that nothing more goes out (no event for that)
        assert audio_ms(h.socket) - sent_at_pause <= LEAD_MS, "the send paused within its lead"
        h.stages.stt_gate.open()
        done = await h.socket.wait_type("response.done", timeout_s=10)
        assert done["response"]["status"] == "completed"
        assert audio_ms(h.socket) == 3 * 2 * 500, "the answer resumed and lost nothing"
        assert not h.socket.of_type("input_audio_buffer.speech_started")[1:], "the hum was no turn"


async def test_a_paced_interruption_stops_its_own_answer_and_no_other() -> None:
    """Two sessions on the same stages, both paced: one is interrupted mid-answer."""
    stages = answer_stages(pieces_ms=500)
    async with Harness(stages, "a", interruption=PACED) as a, Harness(stages, "b", interruption=PACED) as b:
        for h in (a, b):
            append_audio(h.socket, speech(1))
        for h in (a, b):
            await h.socket.wait_type("response.output_audio.delta")
        append_audio(a.socket, speech(QUESTION))
        started = await a.socket.wait_type("input_audio_buffer.speech_started", count=2)
        first = (await a.socket.wait_type("response.done"))["response"]
        assert first["status"] == "cancelled"
        after = a.socket.sent[a.socket.sent.index(started) :]
        assert not [e for e in after if e.get("response_id") == first["id"] and e["type"].endswith(".delta")]
        assert audio_ms(a.socket, first["id"]) <= 1000, "the send stopped with the candidate, within its lead"
        done_b = (await b.socket.wait_type("response.done", timeout_s=10))["response"]
        assert done_b["status"] == "completed"
        assert audio_ms(b.socket) == 3 * 2 * 500, "the other session's answer went on whole"
        assert b.socket.types().count("input_audio_buffer.speech_started") == 1
        second = (await a.socket.wait_type("response.done", count=2, timeout_s=10))["response"]
        assert second["status"] == "completed"
        assert np.isclose(audio_ms(a.socket, second["id"]), 3 * 2 * 500)


async def test_a_held_speculative_answer_is_released_within_its_lead() -> None:
    """Audio made while the answer is held (speculation in the pause) counts as sent ahead:
    its release is no burst beyond the lead."""
    async with Harness(answer_stages(pieces_ms=500), interruption=PACED) as h:
        append_audio(h.socket, speech(1, silence_s=0.3))  # a pause, not yet the turn's end
        await h.stages.until(lambda: bool(h.stages.tts_streams))
        await asyncio.sleep(0.5)  # held meanwhile: what the TTS makes waits in the outbox
        assert not h.socket.of_type("response.output_audio.delta")
        append_audio(h.socket, bytes(2 * REALTIME_RATE))  # the pause becomes the turn's end
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "completed"
        assert most_ahead_ms(h.socket) <= LEAD_MS + SLOP_MS


async def test_the_next_piece_is_synthesised_while_this_one_plays() -> None:
    """Paced, a piece's audio goes out over its own length: the next piece's TTS must not
    wait for it, or the listener hears a gap at every sentence."""
    async with Harness(answer_stages(pieces_ms=1000, pieces=1), interruption=PACED) as h:
        append_audio(h.socket, speech(1))
        await h.stages.until(lambda: len(h.stages.tts_streams) >= 2)
        assert audio_ms(h.socket) <= LEAD_MS + SLOP_MS, "asked for while the first piece had barely begun"
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "completed"
        assert audio_ms(h.socket) == 3 * 1000


async def test_a_candidate_whose_audio_stops_coming_holds_the_answer_no_longer_than_the_pause_limit() -> None:
    """A client that sends audio only while its user speaks: a hum with no silence after
    it leaves its candidate undecided (the VAD waits for audio that never comes); the answer
    plays on after ``MAX_PAUSE_S`` and ends, instead of waiting for ever (a load test's
    sessions did, each waiting for the other)."""
    async with Harness(answer_stages(pieces_ms=300), interruption=PACED) as h:
        append_audio(h.socket, speech(1))
        await h.socket.wait_type("response.output_audio.delta")
        append_audio(h.socket, speech(BACKCHANNEL, seconds=0.6, silence_s=0.0))
        done = await h.socket.wait_type("response.done", timeout_s=MAX_PAUSE_S + 3)
        assert done["response"]["status"] == "completed"
        assert audio_ms(h.socket) == 3 * 2 * 300


async def test_with_interrupt_response_off_speech_over_an_answer_never_pauses_it() -> None:
    """Two sessions on the same stages: one says ``interrupt_response: false``, so speech
    over its answer is a turn of its own and the answer plays on through it, unpaused (it
    paused for up to ``MAX_PAUSE_S`` while a decision that could not change anything was
    made); the other is interrupted as usual."""
    stages = answer_stages(pieces_ms=500)
    async with Harness(stages, "a", interruption=PACED) as a, Harness(stages, "b", interruption=PACED) as b:
        turn_detection = {"type": "server_vad", "interrupt_response": False}
        a.socket.client_sends(
            type="session.update", session={"type": "realtime", "audio": {"input": {"turn_detection": turn_detection}}}
        )
        await a.socket.wait_type("session.updated")
        for h in (a, b):
            append_audio(h.socket, speech(1))
        for h in (a, b):
            await h.socket.wait_type("response.output_audio.delta")
        stages.stt_gate.close()  # a candidate's words would stay undecided, and its answer paused
        append_audio(a.socket, speech(QUESTION, seconds=0.6))
        await a.socket.wait_type("input_audio_buffer.speech_started", count=2)
        sent_then = audio_ms(a.socket)
        async with asyncio.timeout(MAX_PAUSE_S - 0.3):
            while audio_ms(a.socket) < sent_then + 2 * LEAD_MS:
                await asyncio.sleep(0.02)
        stages.stt_gate.open()
        append_audio(b.socket, speech(QUESTION))
        assert (await b.socket.wait_type("response.done", timeout_s=10))["response"]["status"] == "cancelled"
        first = (await a.socket.wait_type("response.done", timeout_s=10))["response"]
        assert first["status"] == "completed"
        assert audio_ms(a.socket, first["id"]) == 3 * 2 * 500, "the answer went on whole"

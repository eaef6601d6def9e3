"""Interruptions that are real (``deployments.realtime.turn_taking.interruptions``), on fake stages.

Question tones stand in for speech (``fakes.speech``); the fake STT hears each tone as its
question, and a test says which of them are backchannels. Every answer here is long (three
pieces of 3 s of audio), so it is still heard while the test speaks over it.
"""

import asyncio

import numpy as np
import pytest
from fakes import FakeStages, Gate, Harness, append_audio, speech

from deployments.metrics import IngressMetrics, SessionMetrics
from deployments.realtime.playback import Playback
from deployments.realtime.spoken_words import holds_a_real_word
from deployments.realtime.transports.audio_out import AnswerAudio
from deployments.realtime.transports.webrtc import FRAME_SAMPLES, AnswerTrack
from deployments.realtime.transports.wire_audio import PCM16
from deployments.realtime.turn_taking.config import InterruptionRules
from handlers.synthetic import ToneTranscriber

BACKCHANNEL, QUESTION = 3, 2
"""Tone 3 is heard as "Mm-hmm."; tone 2 as "Question two." (a real interruption)."""


class LongAnswers(FakeStages):
    """Answers of 9 s of audio, of which only the first piece comes until a test opens the
    TTS gate (the answer is heard, and not done); the STT hears tone 3 as "Mm-hmm." and
    keeps what it heard."""

    def __init__(self) -> None:
        super().__init__()
        self.tts_chunk_ms = 3000
        self.tts_gate.close(after=1)
        self.heard: list[str] = []
        self.transcript_of = self._hear

    def _hear(self, audio: np.ndarray) -> str:
        text = ToneTranscriber().transcribe(audio)
        self.heard.append(text)
        return "Mm-hmm." if text == "Question 3." else text


def audio_start_ms(pcm_before: bytes) -> int:
    """Where speech appended after ``pcm_before`` (24 kHz PCM16) begins."""
    return len(pcm_before) * 1000 // (2 * 24_000)


@pytest.mark.parametrize(
    ("transcript", "real"),
    [
        ("Mm-hmm.", False),
        ("MMM. M-H-M. Uh-huh, erm", False),
        ("Yeah, right.", False),
        ("Okay. Thank you.", False),
        ("[coughs]", False),
        ("(laughing) *knock*", False),
        ("", False),
        ("in", False),  # what tiny.en made of Piper's hums (bench: "What STT makes of a hum")
        ("In a m m.", False),
        ("and h m", False),
        ("M N N N.", False),
        ("Aha", False),  # what tiny.en made of Piper's "Ha ha."
        ("Heh heh. Hahaha!", False),
        ("Here.", True),
        ("Wait, stop.", True),
        ("Stop.", True),
        ("But why?", True),
        ("Hold on.", True),
        ("No.", True),
        ("Yeah, but what about Paris?", True),
    ],
)
def test_a_real_word_is_one_beyond_backchannels_and_sounds(transcript: str, real: bool) -> None:
    assert holds_a_real_word(transcript) is real


async def test_a_backchannel_during_an_answer_leaves_it_playing_and_is_no_turn() -> None:
    async with Harness(LongAnswers()) as h:
        first_turn = speech(1)
        append_audio(h.socket, first_turn)
        await h.socket.wait_type("response.output_audio.delta")
        backchannel = speech(BACKCHANNEL, seconds=0.6, silence_s=1.0)
        append_audio(h.socket, backchannel)
        await h.stages.until(lambda: len(h.stages.stt_calls) >= 2)  # its words were looked at
        question = speech(QUESTION)
        append_audio(h.socket, question)  # then a real interruption: turns are taken in order
        second = await h.socket.wait_type("input_audio_buffer.speech_started", count=2)
        assert abs(second["audio_start_ms"] - audio_start_ms(first_turn + backchannel)) < 100
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "cancelled", "the question, not the mm-hmm, interrupted"
        h.stages.tts_gate.open()
        await h.socket.wait_type("response.done", count=2)
        users = [m for m in h.stages.llm_requests[-1].messages if m["role"] == "user"]
        assert [m["content"] for m in users] == ["Question 1.", "Question 2."], "no item for the mm-hmm"
        assert len(h.socket.of_type("input_audio_buffer.committed")) == 2


async def test_a_backchannel_in_a_silence_of_the_answer_is_no_turn_either() -> None:
    stages = LongAnswers()
    stages.tts_chunk_ms = 100  # the first piece is heard at once; the rest waits for the gate
    async with Harness(stages) as h:
        first_turn = speech(1)
        append_audio(h.socket, first_turn)
        await h.socket.wait_type("response.output_audio.delta")
        await asyncio.sleep(0.5)  # the time it takes the answer's audio to run out (a slow TTS)
        backchannel = speech(BACKCHANNEL, seconds=0.6, silence_s=1.0)
        append_audio(h.socket, backchannel + speech(QUESTION))
        second = await h.socket.wait_type("input_audio_buffer.speech_started", count=2)
        assert abs(second["audio_start_ms"] - audio_start_ms(first_turn + backchannel)) < 100, "not the mm-hmm"
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "cancelled"
        h.stages.tts_gate.open()
        await h.socket.wait_type("response.done", count=2)
        assert len(h.socket.of_type("input_audio_buffer.committed")) == 2, "no item for the mm-hmm"


class Decisions(SessionMetrics):
    """The session's metrics, keeping what the gate decided and after how much speech."""

    def __init__(self) -> None:
        super().__init__(IngressMetrics())
        self.decided: list[tuple[bool, float]] = []

    def interruption(self, confirmed: bool, heard_s: float) -> None:
        self.decided.append((confirmed, heard_s))
        super().interruption(confirmed, heard_s)


async def test_a_real_interruption_is_a_turn_from_its_onset_once_its_words_are_heard() -> None:
    decisions = Decisions()
    async with Harness(LongAnswers(), metrics=decisions) as h:
        first_turn = speech(1)
        append_audio(h.socket, first_turn)
        await h.socket.wait_type("response.output_audio.delta")
        turn_calls = len(h.stages.over_answer_looks)
        h.stages.stt_gate.close()  # the interruption's words are not in yet
        append_audio(h.socket, speech(QUESTION))
        await h.stages.until(lambda: len(h.stages.stt_calls) >= 2)
        assert len(h.socket.of_type("input_audio_buffer.speech_started")) == 1, "nothing said of a candidate"
        h.stages.stt_gate.open()
        started = await h.socket.wait_type("input_audio_buffer.speech_started", count=2)
        assert abs(started["audio_start_ms"] - audio_start_ms(first_turn)) < 100, "its real onset"
        done = await h.socket.wait_type("response.done")
        assert (done["response"]["status"], done["response"]["status_details"]["reason"]) == (
            "cancelled",
            "turn_detected",
        )
        h.stages.tts_gate.open()
        second = await h.socket.wait_type("response.done", count=2)
        assert second["response"]["status"] == "completed"
        ((confirmed, heard_s),) = decisions.decided
        assert confirmed and heard_s >= InterruptionRules().min_duration_ms / 1000, decisions.decided
        look, *later = h.stages.over_answer_looks[turn_calls:]
        assert look, "a look at words over the answer"
        assert not any(h.stages.over_answer_looks[:turn_calls] + later), "a turn's transcript is a turn's"


async def test_a_cough_during_an_answer_is_not_even_transcribed() -> None:
    async with Harness(LongAnswers()) as h:
        append_audio(h.socket, speech(1))
        await h.socket.wait_type("response.output_audio.delta")
        cough = speech(BACKCHANNEL, seconds=0.2, silence_s=1.0)  # under min_duration_ms
        append_audio(h.socket, cough + speech(QUESTION))
        await h.socket.wait_type("input_audio_buffer.speech_stopped", count=2)
        assert "Question 3." not in h.stages.heard
        assert len(h.socket.of_type("input_audio_buffer.speech_started")) == 2, "nothing of the cough"


async def test_a_failed_look_at_the_words_takes_the_interruption_as_real() -> None:
    async with Harness(LongAnswers(), stage_timeout_s=5.0) as h:
        append_audio(h.socket, speech(1))
        await h.socket.wait_type("response.output_audio.delta")
        h.stages.fail_transcribe_async = True
        append_audio(h.socket, speech(QUESTION))
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "cancelled"


async def test_speech_while_nothing_is_heard_starts_a_turn_at_once() -> None:
    async with Harness(LongAnswers()) as h:
        h.stages.stt_gate.close()
        append_audio(h.socket, speech(1))
        await h.socket.wait_type("input_audio_buffer.speech_started")  # no words needed, none heard


async def test_a_session_may_ask_for_every_onset_to_interrupt_at_once() -> None:
    immediate = {"min_duration_ms": 0, "ignore_backchannels": False}
    turn_detection = {"type": "server_vad", "interruption": immediate}
    async with Harness(LongAnswers()) as h:
        h.socket.client_sends(
            type="session.update", session={"type": "realtime", "audio": {"input": {"turn_detection": turn_detection}}}
        )
        updated = await h.socket.wait_type("session.updated")
        served = updated["session"]["audio"]["input"]["turn_detection"]["interruption"]
        assert served == h.config.interruption.model_dump() | immediate
        append_audio(h.socket, speech(1))
        await h.socket.wait_type("response.output_audio.delta")
        h.stages.stt_gate.close()
        append_audio(h.socket, speech(BACKCHANNEL, seconds=0.6))
        await h.socket.wait_type("input_audio_buffer.speech_started", count=2)
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "cancelled"


@pytest.mark.parametrize(
    ("interruption", "param"),
    [
        ({"min_duration_ms": -1}, "min_duration_ms"),
        ({"min_duration_ms": 300, "words": True}, "words"),
        ("soon", None),
    ],
)
async def test_bad_interruption_rules_are_refused_and_change_nothing(interruption: object, param: str | None) -> None:
    turn_detection = {"type": "server_vad", "silence_duration_ms": 900, "interruption": interruption}
    async with Harness() as h:
        h.socket.client_sends(
            type="session.update", session={"type": "realtime", "audio": {"input": {"turn_detection": turn_detection}}}
        )
        error = (await h.socket.wait_type("error"))["error"]
        expected = "session.audio.input.turn_detection.interruption"
        assert (error["code"], error["param"]) == ("invalid_value", f"{expected}.{param}" if param else expected)
        h.socket.client_sends(type="session.update", session={"type": "realtime"})
        served = (await h.socket.wait_type("session.updated"))["session"]["audio"]["input"]["turn_detection"]
        assert served["silence_duration_ms"] == 500
        assert served["interruption"] == h.config.interruption.model_dump()


async def test_sessions_on_the_same_stages_each_keep_their_own_interruptions() -> None:
    """Three sessions share the stages: one hears a backchannel and then a question, one
    only the question, one nothing."""
    stages = LongAnswers()
    async with Harness(stages, "a") as a, Harness(stages, "b") as b, Harness(stages, "c") as c:
        gates = {name: stages.session_tts_gates.setdefault(name, Gate()) for name in "abc"}
        for gate in gates.values():
            gate.close(after=1)  # each answer's first piece, until the test says
        first_turn, backchannel = speech(1), speech(BACKCHANNEL, seconds=0.6, silence_s=1.0)
        for h in (a, b, c):
            append_audio(h.socket, first_turn)
        for h in (a, b, c):
            await h.socket.wait_type("response.output_audio.delta")
        append_audio(a.socket, backchannel + speech(QUESTION))
        append_audio(b.socket, speech(QUESTION))
        for h, onset in ((a, first_turn + backchannel), (b, first_turn)):
            started = await h.socket.wait_type("input_audio_buffer.speech_started", count=2)
            assert abs(started["audio_start_ms"] - audio_start_ms(onset)) < 100
            assert (await h.socket.wait_type("response.done"))["response"]["status"] == "cancelled"
        gates["a"].open()
        gates["b"].open()
        for h in (a, b):
            assert (await h.socket.wait_type("response.done", count=2))["response"]["status"] == "completed"
        gates["c"].open()
        assert (await c.socket.wait_type("response.done"))["response"]["status"] == "completed"
        assert len(c.socket.of_type("input_audio_buffer.speech_started")) == 1


class ServerPlayed:
    """A transport's audio port that plays the audio itself (as WebRTC's track does)."""

    plays_itself = True

    def __init__(self) -> None:
        self.paused: list[bool] = []

    def pause(self, paused: bool) -> None:
        self.paused.append(paused)

    def finished(self, response_id: str) -> None:
        pass


async def test_the_listener_clock_counts_what_was_sent_and_shifts_by_a_pause() -> None:
    now = [100.0]
    audio = ServerPlayed()
    paused = audio.paused
    playback = Playback(audio, clear=lambda: None, clock=lambda: now[0])  # type: ignore[arg-type]
    assert not playback.playing()
    playback.sent(1000)
    playback.sent(1000)  # heard after the first
    now[0] = 101.5
    assert playback.playing()
    playback.pause()
    now[0] = 110.0
    assert playback.playing(), "paused audio is still to be heard"
    playback.resume()
    assert paused == [True, False]
    now[0] = 110.4
    assert playback.playing(), "0.5 s were left when it paused"
    now[0] = 110.8
    assert playback.playing(), "a silence inside the answer: its response.done has not gone out"
    playback.answer_over("resp_1")
    assert not playback.playing()
    playback.sent(1000)
    playback.stopped()
    assert not playback.playing()


async def test_a_paused_webrtc_track_plays_silence_and_then_what_was_left() -> None:
    told: list[object] = []
    track = AnswerTrack(told.append)
    frame = np.full(FRAME_SAMPLES, 1000, np.int16).tobytes()
    await track.play(AnswerAudio("resp_1", "item_1", 0, PCM16, frame * 2))
    track.paused = True
    silent = await track.recv()
    assert not np.asarray(silent.to_ndarray()).any()
    track.paused = False
    assert np.asarray((await track.recv()).to_ndarray()).all()
    assert np.asarray((await track.recv()).to_ndarray()).all(), "nothing was lost to the pause"
    await track.play(AnswerAudio("resp_1", "item_1", 0, PCM16, frame))
    track.paused = True
    await track.clear()
    assert not track.paused, "a barge-in's clear ends the pause with the audio"

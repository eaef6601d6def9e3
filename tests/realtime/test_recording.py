"""Recording and the session report: the stereo file's two channels on the caller's timeline,
the cut at a barge-in, the cap, the directory's sweep, and the session's opt-in (fake stages)."""

import json
import os
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import FakeStages, FakeStream, Harness, append_audio, speech
from pydantic import ValidationError

from deployments.messages import TTSRequest
from deployments.realtime.protocol import ProtocolError, error_event
from deployments.realtime.recording.capture import RecordingRequest, Recordings
from deployments.realtime.recording.config import RecordingConfig
from deployments.realtime.recording.report import MAX_ENTRIES, SessionReport, turn_timings
from deployments.realtime.recording.retention import sweep
from deployments.realtime.recording.wav import FLUSH_BYTES, RATE, StereoRecording
from deployments.realtime.transports.audio_out import CLEAR_AUDIO, AnswerAudio
from deployments.realtime.transports.wire_audio import PCM16, PCMU
from handlers import g711

MS = RATE // 1000
"""Samples per millisecond."""


def noise(ms: int, seed: int) -> bytes:
    """PCM16 that no other call of this gives: a channel's content can be found by it."""
    return np.random.default_rng(seed).integers(-20000, 20000, ms * MS, dtype="<i2").tobytes()


def frame(pcm16: bytes, response_id: str = "resp_1") -> AnswerAudio:
    return AnswerAudio(response_id, "item_1", 0, PCM16, pcm16)


def channels(path: Path) -> tuple[bytes, bytes]:
    """The WAV's left and right channels as PCM16."""
    with wave.open(str(path)) as wav:
        assert (wav.getnchannels(), wav.getsampwidth(), wav.getframerate()) == (2, 2, RATE)
        stereo = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").reshape(-1, 2)
    return stereo[:, 0].tobytes(), stereo[:, 1].tobytes()


def silent(pcm16: bytes) -> bool:
    return not any(pcm16)


async def test_the_callers_channel_is_the_input_bit_exact_and_answers_sit_where_they_were_sent(
    tmp_path: Path,
) -> None:
    recording = StereoRecording(tmp_path, "s", cap_frames=3600 * RATE)
    caller = noise(3000, seed=1)
    first, second, later = noise(400, seed=2), noise(300, seed=3), noise(200, seed=4)
    for offset in range(0, 1000 * MS * 2, 20 * MS * 2):  # 1 s in 20 ms chunks
        recording.caller(caller[offset : offset + 20 * MS * 2], PCM16)
    recording.sent(frame(first))  # at 1.0 s
    recording.sent(frame(second))  # sent at once: after the first, which still plays
    recording.sent(frame(b""))  # the end of a piece carries no audio
    assert recording.playing()
    recording.caller(caller[1000 * MS * 2 : 2000 * MS * 2], PCM16)
    assert not recording.playing()
    recording.sent(frame(later, "resp_2"))  # at 2.0 s: the timeline's present
    recording.caller(caller[2000 * MS * 2 :], PCM16)
    summary = await recording.close()

    assert summary["duration_s"] == 3.0 and not summary["truncated"]
    left, right = channels(tmp_path / summary["file"])
    assert left == caller
    assert right[: 1000 * MS * 2] == bytes(1000 * MS * 2)
    assert right[1000 * MS * 2 : 1700 * MS * 2] == first + second
    assert silent(right[1700 * MS * 2 : 2000 * MS * 2])
    assert right[2000 * MS * 2 : 2200 * MS * 2] == later
    assert silent(right[2200 * MS * 2 :])
    assert not list(tmp_path.glob("*.raw")) and not list(tmp_path.glob(".*.raw")), "the raw channels are gone"


@pytest.mark.parametrize("ahead_ms", [600, 3000], ids=["held-in-memory", "already-on-disk"])
async def test_a_barge_in_cuts_the_answer_where_the_caller_stopped_hearing_it(tmp_path: Path, ahead_ms: int) -> None:
    """An answer sent ahead of playing: what the caller's timeline had not reached when the
    playback was cleared was never heard, and the next answer starts where the cut is."""
    recording = StereoRecording(tmp_path, "s", cap_frames=3600 * RATE)
    answer, next_answer = noise(ahead_ms, seed=5), noise(200, seed=6)
    assert (len(answer) > FLUSH_BYTES) == (ahead_ms > 1000)
    recording.caller(bytes(1000 * MS * 2), PCM16)
    recording.sent(frame(answer))
    recording.caller(bytes(250 * MS * 2), PCM16)  # the caller heard 250 ms, then spoke
    recording.sent(CLEAR_AUDIO)
    assert not recording.playing()
    recording.sent(frame(next_answer, "resp_2"))
    recording.caller(bytes(2000 * MS * 2), PCM16)
    summary = await recording.close()

    _, right = channels(tmp_path / summary["file"])
    assert len(right) == 3250 * MS * 2
    assert right[1000 * MS * 2 : 1250 * MS * 2] == answer[: 250 * MS * 2]
    assert right[1250 * MS * 2 : 1450 * MS * 2] == next_answer
    assert silent(right[1450 * MS * 2 :])


async def test_the_cap_stops_the_recording_and_says_so(tmp_path: Path) -> None:
    recording = StereoRecording(tmp_path, "s", cap_frames=500 * MS)
    caller = noise(800, seed=7)
    recording.caller(caller, PCM16)
    recording.sent(frame(noise(100, seed=8)))  # past the cap: dropped
    summary = await recording.close()
    assert summary["truncated"] and summary["duration_s"] == 0.5
    left, right = channels(tmp_path / summary["file"])
    assert left == caller[: 500 * MS * 2] and silent(right)


async def test_telephone_audio_is_decoded_and_kept_at_24_khz(tmp_path: Path) -> None:
    recording = StereoRecording(tmp_path, "s", cap_frames=3600 * RATE)
    tone = (8000 * np.sin(2 * np.pi * 440 * np.arange(8000) / 8000)).astype("<i2")
    encoded = g711.encode(tone, "ulaw")
    for offset in range(0, len(encoded), 160):  # 20 ms frames at 8 kHz
        recording.caller(encoded[offset : offset + 160], PCMU)
    summary = await recording.close()
    left, _ = channels(tmp_path / summary["file"])
    samples = np.frombuffer(left, dtype="<i2").astype(np.float32)
    assert abs(samples.size - RATE) <= MS, "one second of audio"
    spectrum = np.abs(np.fft.rfft(samples))
    assert abs(np.argmax(spectrum) * RATE / samples.size - 440) < 5


def make(directory: Path, name: str, age_days: float, now: float, size: int = 1000) -> None:
    path = directory / name
    path.write_bytes(bytes(size))
    os.utime(path, (now - age_days * 86400, now - age_days * 86400))


def test_the_sweep_deletes_expired_recordings_only(tmp_path: Path) -> None:
    """Age alone deletes: a recording within its retention stays, whatever room it takes
    (the byte budget refuses new recordings instead, test_recording_budget.py)."""
    now = 2_000_000_000.0
    stem = "20261201T000000000000Z-sess_{}"
    for name, age in [("a", 41), ("b", 2), ("c", 1)]:
        make(tmp_path, f"{stem.format(name)}.wav", age, now)
        make(tmp_path, f"{stem.format(name)}.json", age, now)
    make(tmp_path, f".{stem.format('live')}.left.raw", 0, now)
    make(tmp_path, f".{stem.format('live')}.right.raw", 0, now)
    make(tmp_path, f".{stem.format('lost')}.left.raw", 40, now)  # a lost replica's leftover
    make(tmp_path, f".{stem.format('lost')}.reserved", 40, now)
    make(tmp_path, "notes.txt", 400, now)  # not ours

    assert sweep(tmp_path, retention_days=30, now=now) == [stem.format("a"), stem.format("lost")]
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        [f"{stem.format(name)}.{kind}" for name in "bc" for kind in ("wav", "json")]
        + [f".{stem.format('live')}.left.raw", f".{stem.format('live')}.right.raw", "notes.txt"]
    ), "nothing within its retention, and nothing that is not a recording"
    assert sweep(tmp_path, retention_days=None, now=now) == []


def test_a_directory_cap_that_cannot_hold_one_recording_while_its_wav_is_made_is_refused() -> None:
    """While the WAV is made its raw channels are still there: a recording's peak is twice its size."""
    with pytest.raises(ValidationError, match="max_total_bytes"):
        RecordingConfig(directory="/tmp/r", max_session_s=600, max_total_bytes=100 << 20)
    RecordingConfig(directory="/tmp/r", max_session_s=500, max_total_bytes=100 << 20)


@pytest.mark.parametrize("directory", [False, True], ids=["off", "on-request-not-asked"])
async def test_nothing_is_written_unless_recording_is_on_and_asked_for(tmp_path: Path, directory: bool) -> None:
    where = tmp_path / "recordings"
    recordings = Recordings(RecordingConfig(directory=str(where) if directory else None))
    async with Harness(recording=RecordingRequest(recordings, asked=False)) as h:
        append_audio(h.socket, speech(1))
        await h.socket.wait_type("response.done")
    await recordings.written()
    assert not h.socket.of_type("error")
    assert not where.exists()


async def test_asking_where_the_server_does_not_record_is_refused_and_the_session_goes_on(tmp_path: Path) -> None:
    recordings = Recordings(RecordingConfig())
    async with Harness(recording=RecordingRequest(recordings, asked=True)) as h:
        error = await h.socket.wait_type("error")
        assert h.socket.types()[:2] == ["session.created", "error"]
        assert (error["error"]["code"], error["error"]["param"]) == ("recording_not_enabled", "record")
        h.socket.client_sends(type="response.create")
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "completed"
    await recordings.written()
    assert not list(tmp_path.iterdir())


def speaking_stages() -> FakeStages:
    """Fake stages whose TTS speaks audible, distinct audio (the fakes' own is silence)."""
    stages = FakeStages()
    pieces = iter(range(1000))

    def synthesize(request: TTSRequest) -> FakeStream:
        chunk = noise(stages.tts_chunk_ms, seed=100 + next(pieces))
        return FakeStream([chunk] * stages.tts_chunks, stages.tts_gate, stages.tts_streams)

    stages.synthesize = synthesize  # type: ignore[method-assign]
    return stages


async def test_a_recorded_session_writes_both_sides_and_a_report_of_what_happened(tmp_path: Path) -> None:
    recordings = Recordings(RecordingConfig(directory=str(tmp_path)), {"llm": "fake-llm", "tts": "fake-tts"})
    stages = speaking_stages()
    async with Harness(stages, recording=RecordingRequest(recordings, asked=True)) as h:
        sent = speech(1)
        append_audio(h.socket, sent)
        await h.socket.wait_type("response.done")
        stages.tts_gate.close()
        h.socket.client_sends(type="response.create")
        created = await h.socket.wait_type("response.created", count=2)
        barge_in = speech(2)
        append_audio(h.socket, barge_in)
        cancelled = await h.socket.wait_type("response.done", count=2)
        stages.tts_gate.open()
        await h.socket.wait_type("response.done", count=3)
        h.socket.client_sends(type="conversation.item.retrieve", item_id="item_none")
        await h.socket.wait_type("error")
        tail = bytes(3 * RATE * 2)  # the caller listens to the last answer
        append_audio(h.socket, tail)  # taken in before the client leaves: events are served in order
    await recordings.written()

    (report_path,) = tmp_path.glob("*.json")
    report: dict[str, Any] = json.loads(report_path.read_text())
    assert report["session_id"] == h.session.id and report["models"] == {"llm": "fake-llm", "tts": "fake-tts"}
    assert report["started_at"] < report["ended_at"]
    turns = report["turns"]
    assert [turn["status"] for turn in turns] == ["completed", "cancelled", "completed"]
    assert turns[1]["id"] == created["response"]["id"] and turns[1]["reason"] == "turn_detected"
    assert turns[0]["output"][0]["text"] == "The answer is one. That is all."
    (interruption,) = report["interruptions"]
    assert interruption["response_id"] == cancelled["response"]["id"] and interruption["cancelled"]
    users = [item for item in report["items"] if item.get("role") == "user"]
    assert [user["text"] for user in users] == ["Question one."] * 2
    answers = {item["id"]: item["text"] for item in report["items"] if item.get("role") == "assistant"}
    assert all(answers[output["id"]] == output["text"] for turn in turns for output in turn["output"])
    assert [error["code"] for error in report["errors"]] == ["item_not_found"]

    summary = report["recording"]
    assert summary["sample_rate"] == RATE and not summary["truncated"]
    left, right = channels(tmp_path / summary["file"])
    heard = sent + barge_in + tail
    assert left == heard and summary["duration_s"] == len(heard) / (2 * RATE)
    assert not silent(right), "the answers' audio is on the right"


def test_turn_timings_are_read_from_the_responses_metadata_where_they_are() -> None:
    assert turn_timings({"turn_timings": '{"stt_ms": 120.5, "llm_first_ms": 80}'}) == {
        "stt_ms": 120.5,
        "llm_first_ms": 80,
    }
    assert turn_timings({"turn_timings": "not json"}) is None
    assert turn_timings({"other": "x"}) is None and turn_timings(None) is None


def test_a_flood_of_errors_is_counted_not_kept() -> None:
    """A client's bad events must not grow its session's memory: the report lists so many."""
    report = SessionReport("sess_1", {}, StereoRecording(Path("/nonexistent"), "s", cap_frames=RATE))
    for number in range(MAX_ENTRIES + 5):
        report.sent(error_event(ProtocolError("invalid_event", f"bad event {number}")))
    finished = report.finished({})
    assert len(finished["errors"]) == MAX_ENTRIES and finished["not_listed"] == {"errors": 5}
    assert finished["errors"][-1]["message"] == f"bad event {MAX_ENTRIES - 1}"

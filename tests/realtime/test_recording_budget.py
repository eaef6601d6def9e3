"""The recordings' byte budget while they are written, on the real file system: the recording
that passes it stops (a valid WAV, its report saying why) while the others finish whole, a new
one is refused and its client told, expired ones make room, never more on disk than the budget, and no session's
recording deletes another's."""

import json
import os
import time
from pathlib import Path
from typing import Any

from fakes import Harness, append_audio, speech
from test_recording import MS, channels, frame, noise, speaking_stages

from deployments.realtime.recording.budget import Budget, Share
from deployments.realtime.recording.capture import RecordingRequest, Recordings
from deployments.realtime.recording.config import RecordingConfig, peak_bytes
from deployments.realtime.recording.retention import RECORDING_FILE, used_bytes
from deployments.realtime.recording.wav import RATE, StereoRecording
from deployments.realtime.transports.wire_audio import PCM16

BUDGET = 1 << 20
SECOND = RATE * 2
"""One second of one raw channel, in bytes."""


def stem(name: str) -> str:
    return f"20261206T100000000000Z-sess_{name}"


def on_disk(directory: Path) -> int:
    """The recordings' files' bytes (a share's file is a size, not disk)."""
    paths = (path for path in directory.iterdir() if RECORDING_FILE.match(path.name))
    return sum(path.stat().st_size for path in paths if path.suffix != ".reserved")


def others_recording(directory: Path, size: int, age_days: float = 0) -> dict[str, bytes]:
    """Another session's finished recording of ``size`` bytes in all; returns its files' bytes."""
    files = {f"{stem('other')}.wav": noise(1, seed=0) * (size // (2 * MS)), f"{stem('other')}.json": b"{}"}
    directory.mkdir(exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
        written = time.time() - age_days * 86_400
        os.utime(directory / name, (written, written))
    return files


def kept(directory: Path, files: dict[str, bytes]) -> bool:
    return all((directory / name).read_bytes() == data for name, data in files.items())


async def test_the_recording_that_passes_the_budget_stops_and_the_others_finish_untouched(tmp_path: Path) -> None:
    budget = Budget(tmp_path, BUDGET, retention_days=None)
    limited: list[tuple[str, str, int, int]] = []

    def recording(name: str) -> StereoRecording:
        def seen(outcome: str) -> None:  # in the writer thread, at the moment the budget is reached
            limited.append((name, outcome, on_disk(tmp_path), used_bytes(tmp_path)))

        return StereoRecording(tmp_path, stem(name), 3600 * RATE, Share(budget, stem(name), seen))

    a, b, c = recording("a"), recording("b"), recording("c")
    said = {name: noise(1000, seed=seed) for name, seed in [("b", 1), ("c", 2)]}
    answers = {name: noise(1000, seed=seed) for name, seed in [("b", 3), ("c", 4)]}
    for name, live in [("b", b), ("c", c)]:  # a second each way: written (and its share taken) at once
        live.sent(frame(answers[name]))
        live.caller(said[name], PCM16)
    long_call = noise(8000, seed=5)  # far more than the budget holds
    for offset in range(0, len(long_call), SECOND):
        a.caller(long_call[offset : offset + SECOND], PCM16)
    summaries = {name: await live.close() for name, live in [("a", a), ("b", b), ("c", c)]}

    ((name, outcome, disk, counted),) = limited
    assert (name, outcome) == ("a", "stopped")
    assert disk <= counted <= BUDGET
    stopped = summaries["a"]
    assert stopped is not None and stopped["truncated"] and stopped["truncated_by"] == "max_total_bytes"
    left, right = channels(tmp_path / stopped["file"])
    assert 0 < len(left) < len(long_call) and long_call.startswith(left), "a valid WAV of what it had"
    for name in "bc":
        summary = summaries[name]
        assert summary is not None and not summary["truncated"] and "truncated_by" not in summary
        left, right = channels(tmp_path / summary["file"])
        assert (left, right) == (said[name], answers[name])

    assert on_disk(tmp_path) <= used_bytes(tmp_path) <= BUDGET
    for live in (a, b, c):  # as a session's end does, once its report is written
        live.share.release()
    assert not list(tmp_path.glob(".*.reserved")) and not list(tmp_path.glob(".*.raw"))
    assert used_bytes(tmp_path) == on_disk(tmp_path) < BUDGET - peak_bytes(0, 0)
    assert await recording("e").close() is not None, "finished recordings free what they held"


async def test_a_session_that_asks_where_the_budget_is_full_is_told_goes_on_unrecorded_and_deletes_nothing(
    tmp_path: Path,
) -> None:
    others = others_recording(tmp_path, BUDGET - 40_000)  # less than a recording's first share
    limited: list[str] = []
    config = RecordingConfig(directory=str(tmp_path), max_session_s=2, max_total_bytes=BUDGET)
    recordings = Recordings(config, on_limited=limited.append)
    async with Harness(recording=RecordingRequest(recordings, asked=True)) as h:
        error = (await h.socket.wait_type("error"))["error"]
        assert (error["type"], error["code"], error["param"]) == ("server_error", "recording_refused", "record")
        append_audio(h.socket, speech(1))
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "completed"
    await recordings.written()

    assert limited == ["refused"]
    assert kept(tmp_path, others)
    assert sorted(path.name for path in tmp_path.iterdir() if RECORDING_FILE.match(path.name)) == sorted(others)


async def test_a_live_recording_stops_at_the_budget_and_its_report_says_so_deleting_no_other(tmp_path: Path) -> None:
    """The other recording is the oldest, within its retention: before this budget, the
    session's end deleted it to make room."""
    others = others_recording(tmp_path, BUDGET - 100_000, age_days=10)  # the first share, not a second of audio
    limited: list[str] = []
    config = RecordingConfig(directory=str(tmp_path), max_session_s=2, max_total_bytes=BUDGET, retention_days=30)
    recordings = Recordings(config, on_limited=limited.append)
    async with Harness(speaking_stages(), recording=RecordingRequest(recordings, asked=True)) as h:
        append_audio(h.socket, speech(1))
        error = (await h.socket.wait_type("error"))["error"]
        assert (error["code"], error["param"]) == ("recording_stopped", "record")
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "completed"
    await recordings.written()

    assert limited == ["stopped"]
    assert kept(tmp_path, others)
    (report_path,) = (path for path in tmp_path.glob("*.json") if h.session.id in path.name)
    report: dict[str, Any] = json.loads(report_path.read_text())
    summary = report["recording"]
    assert summary["truncated"] and summary["truncated_by"] == "max_total_bytes"
    assert [error["code"] for error in report["errors"]] == ["recording_stopped"]
    left, _ = channels(tmp_path / summary["file"])
    assert len(left) < len(speech(1)), "stopped before the audio it had no room for"
    assert not list(tmp_path.glob(".*.raw")) and not list(tmp_path.glob(".*.reserved"))
    assert on_disk(tmp_path) == used_bytes(tmp_path) <= BUDGET


def test_expired_recordings_make_room_before_a_recording_is_refused(tmp_path: Path) -> None:
    expired = others_recording(tmp_path, BUDGET - 40_000, age_days=31)
    share = Share(Budget(tmp_path, BUDGET, retention_days=30), stem("new"))
    share.open()
    assert share.limited is None and share.held >= peak_bytes(0, 0)
    assert not any((tmp_path / name).exists() for name in expired)

"""The benchmarks that talk to a served app, at a smoke size through ``s2s-bench``, against
the suite's app on the real models (tests/loadtest/test_bench_smoke.py has the others): each
goes through its whole path and ends with its JSON object; the figures are not asserted."""

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from loadtest import cli
from loadtest.benchmarks import turns

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""


async def run_here(name: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``s2s-bench <name> <argv>`` in this process, on a thread (its own event loop): the last
    line of its output is its JSON object."""
    capsys.readouterr()
    assert await asyncio.to_thread(cli.main, [name, *argv]) == 0
    report: dict[str, Any] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return report


async def test_e2e_times_turns_barge_ins_and_a_webrtc_call(
    realtime_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report = await run_here("e2e", ["--url", realtime_url, "--turns", "1", "--barge-ins", "1"], capsys)
    assert report["turns"] == report["barge_in_rounds"] == report["webrtc_turns"] == 1, report
    assert report["voice_to_voice_ms_p50"] and report["webrtc_voice_to_voice_ms_p50"], report


async def test_turns_times_voice_to_voice_under_a_mode(realtime_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--url", realtime_url, "--modes", "server_vad", "--parts", "voice_to_voice"]
    report = await run_here("turns", argv, capsys)
    assert report["server_vad"]["voice_to_voice"]["turns"] >= 1, report


async def test_turns_scores_the_full_duplex_bench_scenarios_over_each_transport(
    realtime_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """One trial of each scenario (the lists cut to their first), over the WebSocket and
    Twilio calls in μ-law, with a noise reduction asked for (accepted, whatever it does)."""
    for name in ("PAUSED", "INTERRUPTIONS", "QUESTIONS"):
        monkeypatch.setattr(turns, name, getattr(turns, name)[:1])
    monkeypatch.setattr(turns, "BACKCHANNELS", ["Yeah."])
    parts = ["paused", "backchannels", "interruptions", "voice_to_voice", "phone"]
    argv = ["--url", realtime_url, "--modes", "server_vad", "--parts", *parts, "--noise-reduction", "near_field"]
    report = await run_here("turns", argv, capsys)
    fdb = report["server_vad"]["fdb"]
    assert {"pause_handling", "backchannel", "smooth_turn_taking", "user_interruption"} <= fdb.keys(), fdb
    assert all(fdb[s]["of"] == 1 for s in ("pause_handling", "backchannel", "smooth_turn_taking", "user_interruption"))
    assert fdb["smooth_turn_taking"]["tor"] == 1.0, fdb  # a plain question is answered
    assert fdb["user_interruption"]["speech_started_ms"]["n"] == 1, fdb  # the interruption stopped the answer
    assert fdb["onset_to_stopped_ms"]["websocket"]["n"] == 1, fdb
    phone = report["server_vad"]["phone"]  # the mode's turn detection through the call's client secret
    assert phone["interruptions"]["said"] == phone["backchannels"]["backchannels"] == phone["paused"]["sentences"] == 1
    assert phone["fdb"]["onset_to_clear_ms"]["n"] >= 1, phone  # the interruption cleared the call's audio
    assert fdb["phone_vs_24khz"]["missed_interruptions"]["24khz"]["of"] == 1, fdb
    assert report["settings"]["noise_reduction"] == "near_field"


async def test_phone_times_a_phone_turn_beside_a_realtime_one(
    realtime_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    report = await run_here("phone", ["--url", realtime_url, "--turns", "1"], capsys)
    assert report["turns"] == report["phone_turns"] == 1, report


async def test_quality_asks_by_text_and_voice_and_judges_a_saved_report_again(
    realtime_url: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "quality.json"
    argv = ["--url", realtime_url, "--mode", "text", "--mode", "voice", "--kinds", "context,tool", "--limit", "2"]
    report = await run_here("quality", [*argv, "--out", str(out)], capsys)
    for mode in ("text", "voice"):
        assert report[mode]["questions"] == 2 and report[mode]["failed"] == 0, report
    assert report["voice"]["question_wer"] is not None, report
    assert (await run_here("quality", ["--judge", str(out)], capsys))["voice"] == report["voice"]

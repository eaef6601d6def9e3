"""Every benchmark runs through ``s2s-bench`` at a smoke size and ends with its JSON object.

The sizes are the smallest that still go through each benchmark's whole path; the figures are
not asserted, only that the run works and its report holds what the docs quote. Where another
test already runs a benchmark through the entry point it is named here, not run twice:
``client`` (tests/loadtest/test_client.py), ``load`` (tests/e2e/test_loadtest.py),
``telephony`` (tests/e2e/test_phone_edges.py), ``scaling`` and ``two-node``
(tests/loadtest/test_scale_out_benches.py); ``e2e``, ``turns`` and ``phone`` talk to the suite's
served app (tests/e2e/test_bench_served.py). ``disruption`` and ``cluster-swap`` change or
start whole clusters under a load of minutes: their commands are checked
(tests/loadtest/test_bench_commands.py), and what they exercise, resuming through a killed
replica, a redeploy and a cluster's records in Redis, is tests/e2e/test_session_resume.py's
and tests/realtime/test_resume.py's.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from handlers.audio import SPEECH_RATE
from loadtest import cli

BENCH_TIMEOUT_S = 600
"""Only ends a hung benchmark."""


def last_json(output: str) -> dict[str, Any]:
    """The benchmark's JSON object: its output's last line (or its whole output, indented)."""
    text = output.strip()
    try:
        report: dict[str, Any] = json.loads(text.splitlines()[-1])
    except json.JSONDecodeError:
        report = json.loads(text[text.index("\n{") + 1 :] if not text.startswith("{") else text)
    return report


def run_apart(name: str, *args: str) -> dict[str, Any]:
    """``s2s-bench <name> <args>`` in a process of its own (one that starts a Ray of its own), as
    from a user's shell: without the Serve settings of the suite's HAProxy run, which Ray reads
    once, at import (its high-throughput handles cannot be called outside an event loop)."""
    environ = {name: value for name, value in os.environ.items() if not name.startswith("RAY_SERVE_")}
    done = subprocess.run(
        [sys.executable, "-m", "loadtest", name, *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=BENCH_TIMEOUT_S,
    )
    assert done.returncode == 0, f"s2s-bench {name} failed:\n{done.stderr[-4000:]}"
    return last_json(done.stdout)


@pytest.mark.fast
def test_results_plots_redraws_the_pages_plots_from_the_saved_reports(tmp_path: Path) -> None:
    report = run_apart("results-plots", "--out-dir", str(tmp_path))
    assert report["files"] and all((tmp_path / Path(name).name).stat().st_size > 10_000 for name in report["files"])


@pytest.mark.fast
def test_cpu_reads_each_process_roles_cpu_over_a_window() -> None:
    report = run_apart("cpu", "--seconds", "0.5")
    assert report["window_s"] >= 0.5 and "roles" in report


@pytest.mark.cluster
def test_cancel_measures_both_placements() -> None:
    report = run_apart("cancel", "--shared-sessions", "2", "--dedicated-sessions", "1", "--runs", "1")
    for placement in ("shared", "dedicated"):
        assert report[placement]["cancel_to_observed_ms_p99"], report


@pytest.mark.cluster
def test_soak_reports_growth_and_leaked_actors(tmp_path: Path) -> None:
    report = run_apart("soak", "--minutes", "0.05", "--warmup-s", "2", "--sessions", "2", "--out-dir", str(tmp_path))
    assert report["completed_turns"] > 0 and report["leaked_actors"] == {}, report
    assert report["stale_bytes"] == report["leaks"] == 0, report


@pytest.mark.models
def test_handlers_times_each_model() -> None:
    report = run_apart("handlers")
    assert {"stt_rtf", "llm_ttft_ms", "tts_rtf"} <= set(report), report


@pytest.mark.models
def test_vad_measures_each_placement() -> None:
    report = run_apart("vad", "--sessions", "2", "--rounds", "3", "--noise-reduction", "near_field")
    assert report["ingress"] and report["deployment"] and report["call_per_session"], report
    assert report["ingress_noise_reduction"][0]["sessions"] == 2, report


@pytest.mark.models
def test_mulaw_reads_piper_back_over_the_phone(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["mulaw", "--sentences", "1"]) == 0
    report = last_json(capsys.readouterr().out)
    assert report["sentences"] == 1 and 0 <= report["wer_mulaw_8khz"] <= 1, report


@pytest.mark.models
def test_stt_decode_compares_settings_and_reproduces_the_handler(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["stt-decode", "--limit", "2", "--variants", "baseline,no_language,full_window"]) == 0
    report = last_json(capsys.readouterr().out)
    assert report["clips"] == 2 and report["full_window_reproduces_handler"], report
    assert all(0 <= variant["wer"] <= 1 and variant["decode_ms_p50"] for variant in report["variants"].values()), report


@pytest.mark.models
def test_backchannel_words_judges_each_rendering(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["backchannel-words", "--phrases", "1", "--first-look-ms", "150"]) == 0
    report = last_json(capsys.readouterr().out)
    said = report["first_look_150ms"]
    assert said["backchannels_said"] == said["interruptions_said"] > 0, said  # one phrase of each, every rendering


@pytest.mark.fast
def test_vad_reports_no_rate_where_the_cpu_clock_saw_no_tick() -> None:
    """A smoke-sized run may use less CPU than the clock's tick: no rate, not a crash."""
    from loadtest.benchmarks import vad

    audio = np.zeros(2 * SPEECH_RATE, dtype=np.float32)
    report = vad.measure(2, 1, audio, lambda calls: None, [])
    assert report["cpu_ms_per_session_s"] == 0 and report["sessions_per_core"] is None

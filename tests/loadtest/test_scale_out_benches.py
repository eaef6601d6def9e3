"""The scale-out benches run end to end at a tiny size: each starts its own Ray (one node, or
a simulated two-node cluster), serves the synthetic application, loads it through HAProxy,
and prints the JSON the docs quote. Sizes are smoke sizes; the figures are not asserted,
only that the benches work and that what they report is consistent."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.cluster
"""Ray clusters (or launchers) of its own, synthetic engines: only ``make test`` runs these."""

BENCH_TIMEOUT_S = 600
"""A slow CI host took 219 s for the two-node bench (Ray, two nodes, HAProxy, the app): the
limit only ends a hung bench."""


def run_bench(name: str, *args: str) -> dict[str, Any]:
    """Runs ``s2s-bench <name> <args>`` in a process of its own (it starts its own Ray); its
    last line of output is its JSON report."""
    done = subprocess.run(
        [sys.executable, "-m", "loadtest", name, *args], capture_output=True, text=True, timeout=BENCH_TIMEOUT_S
    )
    assert done.returncode == 0, f"s2s-bench {name} failed:\n{done.stderr[-4000:]}"
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def assert_clean(counts: dict[str, Any]) -> None:
    """No stale byte, leak, timeout or disconnect, and some answers completed."""
    assert counts["completed"] > 0, counts
    assert {name: counts[name] for name in ("stale_bytes", "leaks", "timeouts", "disconnects")} == {
        "stale_bytes": 0,
        "leaks": 0,
        "timeouts": 0,
        "disconnects": 0,
    }, counts


def test_scaling_bench_spreads_the_load_over_the_tts_replicas_it_fixes(tmp_path: Path) -> None:
    report = run_bench(
        "scaling",
        *("--replicas", "2", "--sessions", "4", "--duration-s", "8", "--ramp-s", "1"),
        *("--interrupt-rate", "0.3", "--out-dir", str(tmp_path)),
    )
    (run,) = report["runs"]
    assert report["data_path"] == "haproxy" and run["tts_replicas"] == 2
    assert_clean(run)
    assert len(run["tts_requests_per_replica"]) == 2, run  # each replica served
    assert run["throughput_vs_first"] == 1.0
    assert (tmp_path / run["report"]).exists() and (tmp_path / "summary-tts.json").exists()


def test_two_node_bench_puts_an_ingress_on_each_node_and_both_carry_sessions(tmp_path: Path) -> None:
    report = run_bench(
        "two-node",
        *("--sessions", "6", "--duration-s", "12", "--ramp-s", "2", "--out", str(tmp_path / "two-node.json")),
    )
    assert report["one_ingress_replica_per_node"], report["ingress_replicas"]
    assert set(report["nodes"]) == {"head", "worker-1"}
    for node in report["nodes"].values():
        assert node["user_turns"] > 0, report["nodes"]  # each node carried a share
    assert_clean(report["load"])
    assert (tmp_path / "two-node.json").exists()

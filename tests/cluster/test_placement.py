"""The Helm chart's RayService placed on a simulated cluster of several Ray nodes (a head, a CPU
pod and two GPU pods declaring 2 logical GPUs each; ``simulated_gpu_cluster.py``): each model
replica on a GPU of its own, the ingress and VAD on the CPU pod, an extra TTS replica on the
free GPU, and a lost GPU pod failing only the answer in flight, visibly."""

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.cluster
"""Ray clusters (or launchers) of its own, synthetic engines: only ``make test`` runs these."""

DRIVER = Path(__file__).with_name("simulated_gpu_cluster.py")
GPU_DEPLOYMENTS = {"STT", "LLM", "TTS"}
ANSWER_WORDS = 40
CPU_POOL = {"s2s-serve/pool": "cpu"}
"""The node labels of the chart's CPU pods."""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("placement") / "report.json"
    run = subprocess.run(
        [sys.executable, str(DRIVER), str(out)],
        env={**os.environ, "RAY_ADDRESS": ""},  # a cluster of its own, not the suite's
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    print(json.dumps(result, indent=2))  # the placement tables, for whoever reads the log
    return result


def gpus_of(nodes: dict[str, Any], name: str) -> set[tuple[str, str]]:
    return {(name, str(gpu)) for gpu in range(nodes[name]["num_gpus"])}


def check_placement(rows: Iterable[dict[str, Any]], nodes: dict[str, Any]) -> set[tuple[str, str]]:
    """No replica on the head; ingress and VAD on CPU pods; every GPU model replica on one GPU
    of a GPU pod that no other replica holds. Returns the GPUs held."""
    held: list[tuple[str, str]] = []
    for row in rows:
        assert row["node"] != "head", row
        if row["deployment"] in GPU_DEPLOYMENTS:
            assert len(row["gpu_ids"]) == 1, row
            held.append((row["node"], row["gpu_ids"][0]))
        else:
            assert row["gpu_ids"] == [], row
            assert nodes[row["node"]]["labels"] == CPU_POOL, row
    assert len(held) == len(set(held)), held
    for node, gpu in held:
        assert (node, gpu) in gpus_of(nodes, node)
    return set(held)


def replicas(rows: Iterable[dict[str, Any]], deployment: str) -> list[dict[str, Any]]:
    return [row for row in rows if row["deployment"] == deployment]


def answered(outcome: dict[str, Any], question: int) -> bool:
    words = outcome["transcript"].split()
    whole = words[:2] == ["Answer", f"{question}:"] and len(words) == 2 + ANSWER_WORDS
    return outcome["status"] == "completed" and whole


def test_each_model_replica_gets_a_gpu_of_its_own_and_the_head_no_work(report: dict[str, Any]) -> None:
    nodes = report["nodes"]
    assert nodes["head"] == {"num_cpus": 0, "num_gpus": 0}
    rows = report["placement_at_start"]
    held = check_placement(rows, nodes)
    assert {row["deployment"] for row in rows} == GPU_DEPLOYMENTS | {"RealtimeIngress", "VAD"}
    assert len(held) == 3


def test_an_extra_tts_replica_takes_the_free_gpu(report: dict[str, Any]) -> None:
    nodes = report["nodes"]
    rows = report["placement_with_two_tts"]
    held = check_placement(rows, nodes)
    assert len(replicas(rows, "TTS")) == 2
    gpu_pods = [name for name, node in nodes.items() if name.startswith("gpu-") and "replacement" not in name]
    assert held == set().union(*(gpus_of(nodes, name) for name in gpu_pods))  # both pods, every GPU


def test_the_cancel_scope_hosts_and_session_store_live_on_the_cpu_pods_beside_the_ingress(
    report: dict[str, Any],
) -> None:
    """They take the ingress's node labels: a scope host on a GPU pod went down with it, and a
    new session was refused while it restarted (a CI run, 2026-12-02); the session store
    restarted empty with it, and its sessions were closed (a CI run, 2026-12-05)."""
    nodes = report["nodes"]
    assert report["scope_hosts"], "the first session started them"
    assert len(report["session_store"]) == 1, "the ingress started it"
    for node in report["scope_hosts"] + report["session_store"]:
        assert nodes[node].get("labels") == CPU_POOL, report


def test_a_session_works_end_to_end_across_nodes(report: dict[str, Any]) -> None:
    assert answered(report["end_to_end"], 3), report["end_to_end"]
    assert report["end_to_end"]["errors"] == []


def test_losing_a_gpu_pod_fails_only_the_answer_in_flight_then_serve_reschedules(report: dict[str, Any]) -> None:
    loss = report["node_loss"]
    assert "LLM" in loss["hosted"] and "RealtimeIngress" not in loss["hosted"]
    assert loss["status"] == "failed" and loss["error_code"] in ("llm_failed", "llm_timeout")
    assert [error["code"] for error in loss["errors"]] == [loss["error_code"]]
    assert not any(word in loss["errors"][0]["message"] for word in ("Actor", "pid", "127.0.0.1"))
    assert loss["audio_after_done"] == 0
    assert loss["seconds_to_response_done"] < 15

    before, after = report["placement_with_two_tts"], report["placement_after_replacement"]
    check_placement(after, report["nodes"])
    assert all(row["node"] != loss["lost"] for row in after)
    replacement = next(name for name in report["nodes"] if "replacement" in name)
    moved = sorted(row["deployment"] for row in after if row["node"] == replacement)
    assert moved == sorted(name for name in loss["hosted"] if name in GPU_DEPLOYMENTS)
    assert replicas(after, "RealtimeIngress") == replicas(before, "RealtimeIngress")  # the sessions' ingress lived on

    assert answered(report["same_session_after_replacement"], 6)
    assert answered(report["new_session_after_replacement"], 7)
    assert report["new_session_after_replacement"]["errors"] == []


def test_a_cpu_pod_stopped_through_its_prestop_hook_hands_its_calls_to_another(report: dict[str, Any]) -> None:
    """The chart's preStop hook drains the pod's Ray node: Serve moves both ingress replicas
    to the spare CPU pod, the session that asked is told, closed with 1012, and resumes there with
    its items, answering its next question; the hook returns once the node holds no replica."""
    drain = report["node_drain"]
    assert drain["prestop"]["rc"] == 0 and "0 Serve replicas left" in drain["prestop"]["said"], drain
    assert drain["told"] > 0 and drain["closed_code"] == 1012, drain
    assert drain["resumed_same_id"] and drain["items_replayed"], drain
    assert set(drain["resume_refusals"]) <= {"server_draining"}, "only a replica being moved turned it away"
    assert answered(drain["answer_after_resume"], 9), drain
    assert drain["ingress_nodes_after"] == [drain["spare"]], drain

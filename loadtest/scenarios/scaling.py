"""Scale-out: the same serving-layer load against 1, 2 and 4 fixed TTS (or ingress) replicas.

``s2s-bench scaling [--vary tts|ingress] [--replicas 1 2 4] [--sessions N]
[--duration-s S] [--data-path haproxy|proxy] [--out-dir DIR]`` starts a local Ray of its own,
serves ``cluster/loadtest.yaml``'s synthetic application, runs the load test once per replica
count (a count given twice is run twice: alternate them to tell a trend on a shared machine
from an effect), and prints one JSON object (also written to ``DIR/summary-<vary>.json``):
completed turns per second, its ratio to the first count, voice-to-voice p50/p95/p99, the
requests each replica served, the CPU cores this benchmark's processes and all others used,
and the correctness counters of each run. Each run's full report is ``DIR/<vary>-<count>.json``.

- ``--vary tts`` (the default): TTS is made the bottleneck (each replica holds
  ``--tts-hold-s`` per sentence, one sentence at a time) and its replicas are fixed at each
  count; the ingress is the config's (two replicas).
- ``--vary ingress``: the ingress replicas are fixed at each count; everything else is the
  config's (TTS autoscaling from two replicas, the synthetic engines' own speeds).

``--data-path haproxy`` (the default, as ``make serve-loadtest``) has Ray run HAProxy in front
of the ingress replicas with ``make serve-loadtest``'s settings (the environment is set before
``ray.init()``; explicit values in the environment win); ``proxy`` is Serve's Python proxy.
Through HAProxy each load starts only once HAProxy routes to every ingress replica: until its
reload, connections go to the head's fallback Python proxy.
"""

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import psutil
from ray import serve

from loadtest import options
from loadtest.client.report import write
from loadtest.client.run import LoadConfig, run_load
from loadtest.scenarios.launch import LOADTEST_CONFIG, LocalServe, app_config

COUNTS = ("turns", "completed", "cancelled", "stale_bytes", "leaks", "cut_short", "timeouts", "disconnects", "errors")


def app_args(
    replicas: int, hold_s: float, *, vary: str = "tts", speech_s_per_word: float | None = 0.1
) -> dict[str, Any]:
    """``cluster/loadtest.yaml``'s app args with ``replicas`` fixed replicas of ``vary``."""
    args = app_config(LOADTEST_CONFIG)[1]
    synthetic = {**args["synthetic"], "tts_hold_s_per_sentence": hold_s}
    if speech_s_per_word is not None:
        synthetic["speech_s_per_word"] = speech_s_per_word
    args["synthetic"] = synthetic
    deployment = args["tts" if vary == "tts" else "ingress"]["deployment"]
    deployment.pop("autoscaling_config", None)
    deployment["num_replicas"] = replicas
    return args


class MachineCPU:
    """CPU of this machine over a run, split into this process's tree (the load client, and
    the Ray cluster it started with everything Ray runs) and every other process (another
    workload sharing the machine). Approximate: a process of ours that ends meanwhile is
    counted as another's."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._busy = self._machine_busy_s()
        self._ours = self._ours_s()

    @staticmethod
    def _machine_busy_s() -> float:
        times = psutil.cpu_times()
        return float(sum(times) - times.idle - getattr(times, "iowait", 0.0))

    @staticmethod
    def _ours_s() -> dict[int, float]:
        seconds: dict[int, float] = {}
        me = psutil.Process()
        for process in [me, *me.children(recursive=True)]:
            try:
                times = process.cpu_times()
                seconds[process.pid] = times.user + times.system
            except psutil.Error:
                pass
        return seconds

    def cores(self) -> dict[str, float]:
        """Average cores busy since creation: ``ours``, ``others``."""
        wall = time.monotonic() - self._started
        busy = self._machine_busy_s() - self._busy
        now = self._ours_s()
        ours = sum(seconds - self._ours.get(pid, 0.0) for pid, seconds in now.items())
        return {"ours": round(ours / wall, 2), "others": round(max(0.0, busy - ours) / wall, 2)}


async def measure(local: LocalServe, replicas: int, args: argparse.Namespace, name: str) -> dict[str, Any]:
    app = app_args(replicas, args.tts_hold_s, vary=args.vary, speech_s_per_word=args.speech_s_per_word)
    routing_s = local.deploy(app)
    ingress_replicas = app["ingress"]["deployment"]["num_replicas"]
    config = LoadConfig.from_args(
        args,
        local.url + "/realtime",
        turns=1000,
        seed=1,
        # Interruptions are timed by it to land while the answer streams; without it they
        # mostly come too late, and more often the faster the server (runs unalike).
        calibrate=args.interrupt_rate + args.cancel_rate > 0,
    )
    cpu = MachineCPU()
    result = await run_load(config)
    cores = cpu.cores()
    summary = write(result, args.out_dir / f"{name}.json")
    serve.delete("voice")
    v2v = summary["latency_ms"].get("voice_to_voice_ms", {})
    per_replica = summary["server"]["requests_per_replica"]
    counts = summary["counts"]
    return {
        "report": f"{name}.json",
        f"{args.vary}_replicas": replicas,
        "ingress_replicas": ingress_replicas,
        "seconds_until_haproxy_routed": None if routing_s is None else round(routing_s, 1),
        "completed_turns_per_s": summary["completed_turns_per_s"],
        # Completed plus interrupted: the sessions pace their turns, so below saturation this is
        # the offered load; how many get interrupted depends on how long answers stream.
        "turns_per_s": round(counts["turns"] / summary["duration_s"], 3),
        "voice_to_voice_ms_p50": v2v.get("p50"),
        "voice_to_voice_ms_p95": v2v.get("p95"),
        "voice_to_voice_ms_p99": v2v.get("p99"),
        "tts_requests_per_replica": per_replica.get("TTS", {}),
        "ingress_requests_per_replica": per_replica.get("RealtimeIngress", {}),
        # Cores busy over the run (calibration included): ours, and another workload's.
        "cpu_cores_ours": cores["ours"],
        "cpu_cores_other_processes": cores["others"],
        **{name: counts[name] for name in COUNTS},
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--vary", choices=("tts", "ingress"), default="tts")
    parser.add_argument("--replicas", type=options.positive_int, nargs="+", default=[1, 2, 4])
    options.add(parser, sessions=40, duration_s=90.0, ramp_s=5.0, interrupt_rate=0.0, cancel_rate=0.0)
    parser.add_argument(
        "--tts-hold-s", type=float, help="per sentence and replica (default: 0.25 with --vary tts, else the config's)"
    )
    parser.add_argument(
        "--speech-s-per-word", type=float, help="synthetic speech (default: 0.1 with --vary tts, else the config's)"
    )
    options.add(parser, data_path="haproxy", out_dir=Path("reports/scaling"))


def main(args: argparse.Namespace) -> None:
    synthetic = app_config(LOADTEST_CONFIG)[1]["synthetic"]
    if args.tts_hold_s is None:
        args.tts_hold_s = 0.25 if args.vary == "tts" else synthetic["tts_hold_s_per_sentence"]
    if args.speech_s_per_word is None and args.vary == "tts":
        args.speech_s_per_word = 0.1
    rows = []
    with LocalServe(data_path=args.data_path) as local:
        for index, replicas in enumerate(args.replicas):
            repeated = args.replicas.count(replicas) > 1
            name = f"{args.vary}-{replicas}" + (f"-run{index + 1}" if repeated else "")
            rows.append(asyncio.run(measure(local, replicas, args, name)))
    base = rows[0]["completed_turns_per_s"] or 1.0
    for row in rows:
        row["throughput_vs_first"] = round(row["completed_turns_per_s"] / base, 2)
    report = {
        "data_path": args.data_path,
        "vary": args.vary,
        "sessions": args.sessions,
        "duration_s": args.duration_s,
        "interrupt_rate": args.interrupt_rate,
        "cancel_rate": args.cancel_rate,
        "tts_hold_s_per_sentence": args.tts_hold_s,
        "runs": rows,
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"summary-{args.vary}.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))

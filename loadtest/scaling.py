"""TTS scale-out: the same serving-layer load against 1, 2 and 4 fixed TTS replicas.

``python -m loadtest.scaling [--sessions N] [--duration-s S] [--out-dir DIR]`` starts a local
Ray, serves ``cluster/loadtest.yaml``'s synthetic application with a slow TTS (each replica
holds ``--tts-hold-s`` per sentence, one sentence at a time, so TTS is the bottleneck), runs the
load test once per replica count, and prints one JSON object: completed turns per second, its
ratio to one replica, and voice-to-voice p50/p95 for each.
"""

import argparse
import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import ray
import yaml
from ray import serve

from deployments.app import build_app
from loadtest.report import write
from loadtest.run import LoadConfig, run_load

CONFIG = Path(__file__).parents[1] / "cluster" / "loadtest.yaml"


def app_args(replicas: int, hold_s: float) -> dict[str, Any]:
    args: dict[str, Any] = yaml.safe_load(CONFIG.read_text())["applications"][0]["args"]
    args["synthetic"] = {**args["synthetic"], "tts_hold_s_per_sentence": hold_s, "speech_s_per_word": 0.1}
    tts = args["tts"]["deployment"]
    tts.pop("autoscaling_config")
    tts["num_replicas"] = replicas
    return args


async def measure(port: int, replicas: int, args: argparse.Namespace) -> dict[str, Any]:
    serve.run(build_app(app_args(replicas, args.tts_hold_s)), name="voice", route_prefix="/")
    config = LoadConfig(
        f"ws://127.0.0.1:{port}/v1/realtime",
        args.sessions,
        turns=1000,
        interrupt_rate=0.0,
        cancel_rate=0.0,
        ramp_s=5.0,
        duration_s=args.duration_s,
        seed=1,
        calibrate=False,
    )
    summary = write(await run_load(config), args.out_dir / f"tts-{replicas}.json")
    serve.delete("voice")
    v2v = summary["latency_ms"].get("voice_to_voice_ms", {})
    return {
        "tts_replicas": replicas,
        "completed_turns_per_s": summary["completed_turns_per_s"],
        "voice_to_voice_ms_p50": v2v.get("p50"),
        "voice_to_voice_ms_p95": v2v.get("p95"),
        "tts_requests_per_replica": summary["server"]["requests_per_replica"].get("TTS", {}),
        "stale_bytes": summary["counts"]["stale_bytes"],
        "leaks": summary["counts"]["leaks"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--duration-s", type=float, default=90.0)
    parser.add_argument("--tts-hold-s", type=float, default=0.25)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--out-dir", type=Path, default=Path("reports/scaling"))
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ray.init(num_cpus=2, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    rows = [asyncio.run(measure(port, replicas, args)) for replicas in args.replicas]
    serve.shutdown()
    ray.shutdown()
    base = rows[0]["completed_turns_per_s"] or 1.0
    for row in rows:
        row["throughput_vs_first"] = round(row["completed_turns_per_s"] / base, 2)
    print(json.dumps({"sessions": args.sessions, "tts_hold_s_per_sentence": args.tts_hold_s, "runs": rows}))


if __name__ == "__main__":
    main()

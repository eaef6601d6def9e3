"""Draws docs/bench/README.md's plots from the saved reports, so a picture can never drift from its JSON.

``s2s-bench results-plots`` reads the load-test and scaling reports this module names (paths relative to
``--reports-dir``; the real-model runs sit in ``docs/loadtest``, beside it), writes three PNGs to
``--out-dir`` and prints one JSON object: the files written, and for each the reports it drew.
It measures nothing: after a newer report is saved, name it here and rerun.
"""

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from loadtest import options

# The newest serving-layer load test with barge-ins: the committed config, `ray` store (2026-12-06).
LATENCY_REPORT = ("session-store/batched-on-120.json", "120 sessions, synthetic engines, 2026-12-06")
ANSWER_PATH = {
    "speech_end_to_speech_stopped_ms": "end of speech → speech_stopped",
    "speech_end_to_transcribed_ms": "→ transcript",
    "speech_end_to_response_created_ms": "→ response.created",
    "voice_to_voice_ms": "→ first audio (voice-to-voice)",
}
STOP_PATH = {
    "barge_in_to_last_audio_ms": "barge-in → last old audio (silence)",
    "barge_in_to_response_done_ms": "barge-in → response.done",
    "cancel_to_response_done_ms": "response.cancel → response.done",
    "speech_started_to_response_done_ms": "server: speech_started → response.done",
}
PERCENTILES = ("p50", "p90", "p95", "p99")
# (label, {sessions: [report paths]}): each series is one benchmark on one day.
REAL_MODELS = ("real CPU models, 2026-12-01", {n: [f"../loadtest/real-{n}.json"] for n in (1, 2, 3, 4, 5, 6, 8, 12)})
MAIN_RUNS = {n: [f"stale/main-{n}-s{seed}.json" for seed in (3, 4, 5)] for n in (120, 150, 300)}
SYNTHETIC: list[tuple[str, dict[int, list[str]]]] = [
    ("current code, 3 seeds, 2026-12-05", MAIN_RUNS),
    ("continuous mic, 2026-12-01 evening", {n: [f"density/continuous-{n}-grpc.json"] for n in (120, 150, 200, 300)}),
    ("real silero VAD, 2026-12-01 evening", {n: [f"density/silero-{n}-grpc.json"] for n in (120, 150)}),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the reports are read from and the PNGs written to."""
    parser.add_argument("--reports-dir", type=Path, default=Path("docs/bench"), help="docs/bench (default)")
    options.add(parser, out_dir=Path("docs/bench/plots"))


def load(reports_dir: Path, name: str) -> dict[str, Any]:
    with (reports_dir / name).open() as file:
        report: dict[str, Any] = json.load(file)
    return report


def save(figure: Figure, path: Path) -> str:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return str(path)


Target = tuple[float, str]


def percentile_panel(axis: Axes, latency: dict[str, Any], metrics: dict[str, str], title: str, target: Target) -> None:
    """One line per metric across p50 … p99: a percentile ladder, since reports keep no per-turn samples."""
    axis.axhline(target[0], color="grey", linestyle=":", label=f"target: {target[1]}")
    for key, label in metrics.items():
        if key in latency:
            values = [latency[key][p] for p in PERCENTILES]
            axis.plot(PERCENTILES, values, marker="o", label=f"{label} (n={latency[key]['count']})")
    axis.set_title(title)
    axis.set_xlabel("percentile of turns")
    axis.set_ylabel("ms")
    axis.set_ylim(bottom=0)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)


def latency_plot(reports_dir: Path, out_dir: Path) -> tuple[str, list[str]]:
    """The answer's path and the stop's path, from the newest serving-layer report with barge-ins."""
    name, label = LATENCY_REPORT
    latency = load(reports_dir, name)["latency_ms"]
    figure, (answer, stop) = plt.subplots(1, 2, figsize=(12, 4.8))
    title = "Answer: from the end of the question's speech"
    percentile_panel(answer, latency, ANSWER_PATH, title, (1500, "voice-to-voice p95 ≤ 1500 ms"))
    title = "Stop: from the barge-in (or response.cancel)"
    percentile_panel(stop, latency, STOP_PATH, title, (500, "barge-in p99 ≤ 500 ms"))
    figure.suptitle(f"Latency percentiles, {label} ({name})", fontsize=10)
    return save(figure, out_dir / "latency-percentiles.png"), [name]


def sessions_series(axis: Axes, reports_dir: Path, label: str, runs: dict[int, list[str]], color: str) -> list[str]:
    """p50 (solid) and p95 (dashed) voice-to-voice against sessions; each run a dot, the line through medians."""
    read: list[str] = []
    for percentile, style in (("p50", "-"), ("p95", "--")):
        xs, medians = [], []
        for sessions, names in sorted(runs.items()):
            present = [name for name in names if (reports_dir / name).exists()]
            values = [load(reports_dir, name)["latency_ms"]["voice_to_voice_ms"][percentile] / 1000 for name in present]
            if not values:
                continue
            read += present if percentile == "p50" else []
            axis.scatter([sessions] * len(values), values, color=color, s=12, alpha=0.6)
            xs.append(sessions)
            medians.append(statistics.median(values))
        marker = "o" if percentile == "p50" else "^"
        axis.plot(xs, medians, style, color=color, marker=marker, label=f"{label}, {percentile}")
    return read


def sessions_plot(reports_dir: Path, out_dir: Path) -> tuple[str, list[str]]:
    """How voice-to-voice grows with concurrent sessions: real models, and the serving layer alone."""
    figure, (real, synthetic) = plt.subplots(1, 2, figsize=(12, 4.8))
    read = sessions_series(real, reports_dir, *REAL_MODELS, color="tab:red")
    real.set_title("Real CPU models (make run), interrupt 0.3, cancel 0.1")
    for (label, runs), color in zip(SYNTHETIC, ("tab:blue", "tab:green", "tab:purple"), strict=True):
        read += sessions_series(synthetic, reports_dir, label, runs, color)
    synthetic.set_title("Serving layer, synthetic engines (make serve-loadtest)")
    for axis in (real, synthetic):
        axis.axhline(1.5, color="grey", linestyle=":", label="target: p95 ≤ 1.5 s")
        axis.set_xlabel("concurrent sessions")
        axis.set_ylabel("voice-to-voice, s")
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=7)
    figure.suptitle("Sessions against voice-to-voice (2 cores, client and server together)", fontsize=10)
    return save(figure, out_dir / "sessions-vs-voice-to-voice.png"), read


def scaling_plot(reports_dir: Path, out_dir: Path) -> tuple[str, list[str]]:
    """TTS scale-out (throughput, latency), and the 1-vs-2 ingress runs in the order they ran."""
    tts_name, ingress_name = "scaling/summary-tts.json", "scaling/summary-ingress.json"
    tts, ingress = load(reports_dir, tts_name)["runs"], load(reports_dir, ingress_name)["runs"]
    figure, (throughput, latency, order) = plt.subplots(1, 3, figsize=(15, 4.6))
    replicas = [run["tts_replicas"] for run in tts]
    throughput.plot(replicas, [run["completed_turns_per_s"] for run in tts], marker="o", label="measured")
    one = tts[0]["completed_turns_per_s"] / tts[0]["tts_replicas"]
    throughput.plot(replicas, [one * r for r in replicas], ":", color="grey", label="linear from 1 replica")
    throughput.set_title("TTS scale-out: throughput (40 sessions)")
    throughput.set_ylabel("completed turns/s")
    for percentile, style in (("p50", "-o"), ("p95", "--^")):
        values = [run[f"voice_to_voice_ms_{percentile}"] / 1000 for run in tts]
        latency.plot(replicas, values, style, label=f"voice-to-voice {percentile}")
    latency.set_title("TTS scale-out: latency (0.25 s TTS hold per sentence)")
    latency.set_ylabel("voice-to-voice, s")
    for axis in (throughput, latency):
        axis.set_xlabel("TTS replicas")
        axis.set_xticks(replicas)
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    colors = {1: "tab:orange", 2: "tab:blue"}
    for index, run in enumerate(ingress, start=1):
        count = run["ingress_replicas"]
        order.bar(index, run["voice_to_voice_ms_p95"] / 1000, color=colors.get(count, "grey"), label=f"{count} ingress")
    handles, labels = order.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    order.legend(unique.values(), unique.keys(), fontsize=8)
    order.set_title("1 vs 2 ingress replicas, 120 sessions, in run order")
    order.set_xlabel("run (in the order they ran)")
    order.set_xticks(range(1, len(ingress) + 1))
    order.set_ylabel("voice-to-voice p95, s")
    order.grid(True, axis="y", alpha=0.3)
    figure.suptitle("Horizontal scaling through HAProxy, synthetic engines, 2026-12-01", fontsize=10)
    return save(figure, out_dir / "scaling.png"), [tts_name, ingress_name]


def main(args: argparse.Namespace) -> None:
    """Writes every plot and prints what it wrote and from which reports."""
    args.out_dir.mkdir(parents=True, exist_ok=True)
    figures: dict[str, list[str]] = {}
    for plot in (latency_plot, sessions_plot, scaling_plot):
        path, reports = plot(args.reports_dir, args.out_dir)
        figures[path] = reports
    print(json.dumps({"reports_dir": str(args.reports_dir), "files": list(figures), "figures": figures}))

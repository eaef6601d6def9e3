"""The load test's latencies per turn, and the report's PNG plots of them (latency CDFs, and
sessions, voice-to-voice and replicas over the run)."""

from pathlib import Path
from typing import Any

import numpy as np

from loadtest.client.records import Turn
from loadtest.client.run import LoadResult


def _ms(later: float | None, earlier: float | None) -> float | None:
    return None if later is None or earlier is None else (later - earlier) * 1000


def turn_latencies(turn: Turn) -> dict[str, float | None]:
    """Per-turn latencies in ms; None where the turn did not get that far."""
    response = turn.response
    created = response.created_at if response else None
    first_audio = response.first_audio_at if response else None
    latencies = {
        "speech_end_to_speech_stopped_ms": _ms(turn.speech_stopped_at, turn.speech_end_at),
        "speech_end_to_transcribed_ms": _ms(turn.transcribed_at, turn.speech_end_at),
        "speech_end_to_response_created_ms": _ms(created, turn.speech_end_at),
        "voice_to_voice_ms": _ms(first_audio, turn.speech_end_at),
    }
    if response is not None:  # where the server says the time went
        latencies |= {f"server_{name}": value for name, value in response.server_timings.items()}
    if response is not None and response.status == "completed" and first_audio is not None:
        latencies["audio_gap_ms"] = response.longest_gap_s * 1000  # the answer's longest silence
    if turn.interruption in ("barge-in", "cancel") and response is not None and response.status == "cancelled":
        kind = "barge_in" if turn.interruption == "barge-in" else "cancel"
        latencies[f"{kind}_to_response_done_ms"] = _ms(response.done_at, turn.interrupted_at)
        last = _ms(response.last_audio_at, turn.interrupted_at)
        latencies[f"{kind}_to_last_audio_ms"] = None if last is None else max(0.0, last)
        if kind == "barge_in":
            latencies["speech_started_to_response_done_ms"] = _ms(response.done_at, turn.barge_in_heard_at)
    return latencies


def latency_samples(result: LoadResult) -> dict[str, list[float]]:
    """Every turn's latencies, by metric."""
    samples: dict[str, list[float]] = {}
    for turn in (t for log in result.logs for t in log.turns):
        for name, value in turn_latencies(turn).items():
            if value is not None:
                samples.setdefault(name, []).append(value)
    return samples


def plot(summary: dict[str, Any], result: LoadResult, stem: Path) -> list[Path]:
    """Latency CDFs, and sessions / voice-to-voice / TTS replicas over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = [stem.with_name(f"{stem.name}-latency.png"), stem.with_name(f"{stem.name}-timeline.png")]
    figure, axis = plt.subplots(figsize=(8, 5))
    for name, values in sorted(latency_samples(result).items()):
        ordered = np.sort(values)
        axis.plot(ordered, np.arange(1, len(ordered) + 1) / len(ordered), label=name.removesuffix("_ms"))
    axis.set_xscale("symlog", linthresh=10)
    axis.set_xlabel("ms")
    axis.set_ylabel("fraction of turns")
    axis.set_title("Latency CDFs")
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(paths[0], dpi=110)
    plt.close(figure)

    figure, (sessions, latency, replicas) = plt.subplots(3, 1, figsize=(8, 8), sharex=True)
    timeline = summary["timeline"]
    times = [sample["t"] for sample in timeline]
    sessions.plot(times, [sample.get("sessions", 0) for sample in timeline])
    sessions.set_ylabel("open sessions")
    points = [
        (turn.response.first_audio_at - result.started_at, latencies["voice_to_voice_ms"])
        for turn in (t for log in result.logs for t in log.turns)
        if turn.response is not None
        and turn.response.first_audio_at is not None
        and (latencies := turn_latencies(turn))["voice_to_voice_ms"] is not None
    ]
    if points:
        latency.scatter(*zip(*points, strict=True), s=6)
    latency.set_ylabel("voice-to-voice ms")
    for name in sorted({name for sample in timeline for name in sample.get("replicas", {})}):
        replicas.step(times, [sample.get("replicas", {}).get(name, 0) for sample in timeline], where="post", label=name)
    replicas.set_ylabel("running replicas")
    replicas.set_xlabel("seconds since start")
    replicas.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(paths[1], dpi=110)
    plt.close(figure)
    return paths

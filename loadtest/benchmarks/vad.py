"""CPU per session-second of voice activity detection, by placement, with real silero, and
of noise reduction.

``s2s-bench vad [--sessions 50 200] [--rounds 60]`` feeds N sessions Piper
speech in 96 ms chunks (what each session's audio input sends per call), as fast as the
path takes it, and prints one JSON object with the CPU (user + system, every process that
took part) per second of session audio for:

- ``ingress``: the detector in the caller's process, one batched run per 30 ms tick (each
  tick carries a third of the sessions' chunks), as ``vad.placement: ingress`` runs it;
- ``deployment``: the same ticks as one Serve call each to a VAD deployment, as
  ``vad.placement: deployment`` runs it (caller and replica counted);
- ``call_per_session``: one Serve call per session per chunk, the path before batching;
- ``ingress_noise_reduction`` (``--noise-reduction near_field``): ``ingress`` with every
  session's audio denoised first (DTLN, ``handlers.denoise``), as a session that asks for
  ``noise_reduction`` is heard.

``sessions_per_core`` is where VAD alone would fill one core.
"""

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil

from deployments.models import VAD
from handlers.audio import SPEECH_RATE, pcm16_to_float, resample
from handlers.denoise import Denoiser, DenoiserState, NoiseReductionConfig, NoiseReductionType
from handlers.listening import Hearing, Listener
from handlers.tts import TextToSpeech
from handlers.vad import TurnDetection, VADState, VoiceActivityDetector
from loadtest import options
from loadtest.scenarios.launch import LocalServe

CHUNK = 3 * 512
"""96 ms at 16 kHz: one audio input's call."""
TICKS_PER_ROUND = 3
"""A 30 ms tick sees about a third of the sessions' 96 ms chunks."""


def speech() -> np.ndarray:
    tts = TextToSpeech()
    pcm = b"".join(c.pcm16 for c in tts.synthesize("What is the capital of France? Tell me about its history."))
    voiced = resample(pcm16_to_float(pcm), tts.config.output_rate, SPEECH_RATE)
    return np.concatenate([voiced, np.zeros(SPEECH_RATE, dtype=np.float32)])


def cpu_s(processes: list[psutil.Process]) -> float:
    return sum(p.cpu_times().user + p.cpu_times().system for p in processes)


def measure(
    sessions: int,
    rounds: int,
    audio: np.ndarray,
    run_round: Callable[[list], None],
    processes: list[psutil.Process],
    noise_reduction: NoiseReductionType | None = None,
) -> dict[str, Any]:
    states = [
        Hearing(VADState(TurnDetection()), DenoiserState(noise_reduction) if noise_reduction else None)
        for _ in range(sessions)
    ]
    offsets = [(i * 7919) % (len(audio) - CHUNK) for i in range(sessions)]  # each session elsewhere in the clip
    before, started = cpu_s(processes), time.monotonic()
    for round_index in range(rounds):
        calls = []
        for i, state in enumerate(states):
            at = (offsets[i] + round_index * CHUNK) % (len(audio) - CHUNK)
            calls.append((state, audio[at : at + CHUNK]))
        run_round(calls)
    cpu, wall = cpu_s(processes) - before, time.monotonic() - started
    session_s = sessions * rounds * CHUNK / SPEECH_RATE
    ms = 1000 * cpu / session_s
    return {
        "sessions": sessions,
        "cpu_ms_per_session_s": round(ms, 3),
        "sessions_per_core": int(1000 / ms) if ms > 0 else None,  # None: too little CPU for the clock's ticks
        "faster_than_real_time": round(rounds * CHUNK / SPEECH_RATE / wall, 1),
    }


def ticks(calls: list) -> list[list]:
    """The round's calls over its ticks; with fewer sessions than ticks, no tick runs empty."""
    return [tick for i in range(TICKS_PER_ROUND) if (tick := calls[i::TICKS_PER_ROUND])]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, session_counts=[50, 200])
    parser.add_argument("--rounds", type=options.positive_int, default=60, help="96 ms chunks per session")
    parser.add_argument(
        "--noise-reduction",
        choices=["near_field", "far_field"],
        help="also measure the ingress placement with every session's audio denoised first",
    )


def main(args: argparse.Namespace) -> None:
    with LocalServe() as local:
        report = measure_placements(local, args)
    print(json.dumps(report, indent=2))


def measure_placements(local: LocalServe, args: argparse.Namespace) -> dict[str, Any]:
    audio = speech()
    me = psutil.Process()
    listener = Listener(VoiceActivityDetector(), Denoiser())

    def local_round(calls: list) -> None:
        for tick in ticks(calls):
            listener.listen_batch(tick)

    vad = VAD.options(ray_actor_options={"num_cpus": 0})  # type: ignore[attr-defined]
    handle = local.run(vad.bind(None, NoiseReductionConfig()), "bench-vad")
    (replica,) = [
        p for p in psutil.process_iter(["cmdline"]) if "ServeReplica:bench-vad:VAD" in " ".join(p.info["cmdline"] or [])
    ]
    both = [me, replica]

    def remote_round(groups_of: Callable[[list], list[list]]) -> Callable[[list], None]:
        def run_round(calls: list) -> None:
            groups = groups_of(calls)
            answers = [handle.detect_batch.remote(group) for group in groups]  # all in flight at once
            for group, answer in zip(groups, answers, strict=True):
                for (hearing, _), (returned, _, _) in zip(group, answer.result(), strict=True):
                    hearing.__dict__.update(returned.__dict__)  # a replica answers with a copy

        return run_round

    handle.detect_batch.remote([(Hearing(VADState(TurnDetection())), audio[:CHUNK])]).result()  # warm
    report: dict[str, Any] = {"chunk_ms": CHUNK * 1000 // SPEECH_RATE, "rounds": args.rounds}
    report["ingress"] = [measure(n, args.rounds, audio, local_round, [me]) for n in args.session_counts]
    report["deployment"] = [measure(n, args.rounds, audio, remote_round(ticks), both) for n in args.session_counts]
    alone = remote_round(lambda calls: [[call] for call in calls])
    report["call_per_session"] = [measure(min(args.session_counts), args.rounds, audio, alone, both)]
    if args.noise_reduction is not None:
        report["ingress_noise_reduction"] = [
            measure(n, args.rounds, audio, local_round, [me], args.noise_reduction) for n in args.session_counts
        ]
    return report

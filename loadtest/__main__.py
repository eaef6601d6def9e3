"""``python -m loadtest`` / ``s2s-loadtest``: many concurrent, interrupting Realtime sessions.

Writes the report (JSON at ``--out``, Markdown and PNG plots beside it) and prints its
counters; ``--fail-on-stale`` and ``--fail-on-leak`` turn those counters into the exit code.
"""

import argparse
import asyncio
import json
import sys
from pathlib import Path

from loadtest.report import write
from loadtest.run import LoadConfig, run_load


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a rate is a probability from 0 to 1, not {text}")
    return value


def _positive(kind: type[int] | type[float]) -> "argparse._ActionType":
    def parse(text: str) -> float:
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
        return value

    return parse


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="s2s-loadtest", description=__doc__)
    parser.add_argument("--url", required=True, help="ws://HOST:PORT/v1/realtime")
    parser.add_argument("--sessions", type=_positive(int), required=True, help="concurrent sessions")
    parser.add_argument("--turns", type=_positive(int), default=3, help="questions per session (default 3)")
    parser.add_argument("--interrupt-rate", type=_rate, default=0.0, help="share of answers cut by speech")
    parser.add_argument("--cancel-rate", type=_rate, default=0.0, help="share of answers cut by response.cancel")
    parser.add_argument(
        "--backchannel-rate",
        type=_rate,
        default=0.0,
        help="share of answers a hum is said over; those sessions ask for our interruption rules",
    )
    parser.add_argument(
        "--pause-rate",
        type=_rate,
        default=0.0,
        help="share of questions said with a 0.8 s pause mid-sentence; an answer before they end is a cut-off",
    )
    parser.add_argument(
        "--turn-detection",
        choices=["server_vad", "semantic_vad"],
        help="what each session asks for in a session.update (default: the server's own)",
    )
    parser.add_argument("--ramp-s", type=_non_negative, default=0.0, help="start the sessions over this long")
    parser.add_argument("--duration-s", type=_positive(float), help="stop starting turns after this long")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True, help="report.json (.md and .png beside it)")
    parser.add_argument("--no-calibrate", action="store_true", help="skip answering each question alone first")
    parser.add_argument(
        "--continuous-mic", action="store_true", help="stream silence between questions too, as real clients do"
    )
    parser.add_argument(
        "--voiced-tones", action="store_true", help="synthetic questions with speech under them (synthetic.vad silero)"
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="resume a lost connection with the session's resume_token, and leave a draining one at a turn's end",
    )
    parser.add_argument("--fail-on-stale", action="store_true", help="exit 1 if any stale audio arrived")
    parser.add_argument("--fail-on-leak", action="store_true", help="exit 1 if any answer leaked across sessions")
    args = parser.parse_args(argv)
    if args.interrupt_rate + args.cancel_rate + args.backchannel_rate > 1:
        parser.error("--interrupt-rate, --cancel-rate and --backchannel-rate add up to more than 1")
    if not args.url.startswith(("ws://", "wss://")):
        parser.error(f"--url must be a ws:// or wss:// URL, not {args.url!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = LoadConfig(
        url=args.url,
        sessions=args.sessions,
        turns=args.turns,
        interrupt_rate=args.interrupt_rate,
        cancel_rate=args.cancel_rate,
        ramp_s=args.ramp_s,
        duration_s=args.duration_s,
        seed=args.seed,
        calibrate=not args.no_calibrate,
        continuous_mic=args.continuous_mic,
        voiced_tones=args.voiced_tones,
        backchannel_rate=args.backchannel_rate,
        pause_rate=args.pause_rate,
        turn_detection=args.turn_detection,
        resume=args.resume,
    )
    try:
        result = asyncio.run(run_load(config))
    except ConnectionError as error:
        print(f"s2s-loadtest: {error}", file=sys.stderr)
        return 2
    summary = write(result, args.out)
    print(json.dumps({"counts": summary["counts"], "latency_ms": summary["latency_ms"]}))
    counts = summary["counts"]
    failed = [
        name
        for name, wanted in (("stale_bytes", args.fail_on_stale), ("leaks", args.fail_on_leak))
        if wanted and counts[name]
    ]
    if failed:
        print(f"s2s-loadtest: failed: {', '.join(f'{n}={counts[n]}' for n in failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

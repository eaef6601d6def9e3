"""``s2s-bench load`` (or ``s2s-loadtest``): many concurrent, interrupting Realtime sessions.

Writes the report (JSON at ``--out``, Markdown and PNG plots beside it) and prints its
counters; ``--fail-on-stale`` and ``--fail-on-leak`` turn those counters into the exit code.
"""

import argparse
import asyncio
import json
import sys

from loadtest import options
from loadtest.client.report import write
from loadtest.client.run import LoadConfig, run_load


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, url=options.REQUIRED, sessions=options.REQUIRED, turns=3, interrupt_rate=0.0, cancel_rate=0.0)
    parser.add_argument(
        "--backchannel-rate",
        type=options.rate,
        default=0.0,
        help="share of answers a hum is said over; those sessions ask for our interruption rules",
    )
    parser.add_argument(
        "--pause-rate",
        type=options.rate,
        default=0.0,
        help="share of questions said with a 0.8 s pause mid-sentence; an answer before they end is a cut-off",
    )
    parser.add_argument(
        "--turn-detection",
        choices=["server_vad", "semantic_vad"],
        help="what each session asks for in a session.update (default: the server's own)",
    )
    parser.add_argument(
        "--noise-reduction",
        choices=["near_field", "far_field"],
        help="the noise_reduction each session asks for (default: none)",
    )
    options.add(parser, ramp_s=0.0, duration_s=None, seed=0, out=options.REQUIRED)
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


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.interrupt_rate + args.cancel_rate + args.backchannel_rate > 1:
        parser.error("--interrupt-rate, --cancel-rate and --backchannel-rate add up to more than 1")


def main(args: argparse.Namespace) -> int:
    config = LoadConfig.from_args(args, args.url + "/realtime", calibrate=not args.no_calibrate)
    try:
        result = asyncio.run(run_load(config))
    except ConnectionError as error:
        print(f"s2s-bench load: {error}", file=sys.stderr)
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
        print(f"s2s-bench load: failed: {', '.join(f'{n}={counts[n]}' for n in failed)}", file=sys.stderr)
        return 1
    return 0

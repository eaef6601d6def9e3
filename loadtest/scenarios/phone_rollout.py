"""Phone calls through a rollout: calls over the Twilio route while the app is redeployed.

Each of ``--calls`` calls is placed as Twilio places one (:class:`TwilioCall`): the voice
webhook's TwiML opens its stream, the caller hears the greeting, then asks a tone question
and hears the answer, again and again until ``--duration-s``. At ``--at-s`` the app is
deployed again with the ingress's instructions changed (as ``s2s-bench disruption redeploy``
does). The old replica drains: it closes each call's stream between turns, and the
simulated Twilio side follows the TwiML's ``<Redirect>`` back to the webhook, whose TwiML
connects a new stream that resumes the call's session.

Prints one JSON object: calls that came back on a new stream and were answered there; calls
resumed (a new stream that is not greeted again: a new session would greet); the caller's
gap, from the old stream's close to the new stream's ``start`` (the webhook's round trip
and the new handshake: the time no one hears the caller); how many streams each call took
(a stream turned away by a replica still draining is one more); questions lost to a close;
failures. Against ``make serve-loadtest``::

    s2s-bench phone-rollout --url ws://127.0.0.1:8000/v1 --calls 20 --at-s 20 --duration-s 60 --out r.json
"""

import argparse
import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from websockets.exceptions import ConnectionClosed

from handlers.synthetic import MAX_QUESTION
from loadtest import options
from loadtest.benchmarks.telephony import ANSWER_TIMEOUT_S, SILENCE, mulaw_question
from loadtest.client.twilio_caller import TwilioCall, TwilioCaller
from loadtest.scenarios.disruption import redeploy
from loadtest.scenarios.launch import LOADTEST_CONFIG
from loadtest.stats import percentile

GREETED_WITHIN_S = 1.5
"""A new session greets at once (its audio is kept ready): a resumed stream that hears
nothing for this long was not greeted again."""


@dataclass
class CallRecord:
    """What one call went through."""

    streams: int = 0
    answers_after_reconnect: int = 0
    greeted_again: int = 0
    gaps_s: list[float] = field(default_factory=list)
    """Old stream closed → new stream's ``start``: how long the caller is heard by no one."""
    questions_lost: int = 0
    """Questions the server closed the stream on after they began, before their answer did."""
    closes: list[str] = field(default_factory=list)
    """How the server closed each stream: ``<code> <reason>``."""
    failure: str | None = None


async def place(webhook: str, name: str, deadline: float, rng: random.Random) -> CallRecord:
    """One call, to its deadline, following its TwiML across every stream the server closes."""
    record = CallRecord()
    call = TwilioCall(webhook, name)
    closed_at: float | None = None
    try:
        twiml = await call.next()
        while time.monotonic() < deadline and call.ending is None:
            async with call.stream(twiml) as stream:
                record.streams += 1
                if closed_at is not None:
                    record.gaps_s.append(stream.started_at - closed_at)
                closed_at = await converse(stream, record, deadline, rng, reconnected_at=closed_at)
            if closed_at is None:
                break  # the call's time is up: the caller hangs up (stop)
            twiml = await call.next()
    except Exception as exc:  # one call's failure is reported, the others go on
        record.failure = f"{name}: {type(exc).__name__}: {str(exc)[:200]}"
    return record


async def converse(
    stream: TwilioCaller, record: CallRecord, deadline: float, rng: random.Random, reconnected_at: float | None
) -> float | None:
    """Questions and answers on one stream; when the server closed it, when that was."""
    asked_at: float | None = None
    try:
        if reconnected_at is None:  # the call's first stream: the greeting, heard to its end
            await stream.until_answered(1, ANSWER_TIMEOUT_S)
        else:
            try:
                await stream.until(lambda: stream.answers[0].first_audio_at is not None, GREETED_WITHIN_S)
                record.greeted_again += 1
                await stream.until_answered(1, ANSWER_TIMEOUT_S)
            except TimeoutError:
                pass  # not greeted: the session resumed
        while time.monotonic() < deadline:
            answered = len(stream.answered())
            asked_at = time.monotonic()
            await stream.say(mulaw_question(rng.randint(1, MAX_QUESTION)) + SILENCE)
            await stream.until_answered(answered + 1, ANSWER_TIMEOUT_S)
            asked_at = None
            record.answers_after_reconnect += reconnected_at is not None
            with contextlib.suppress(TimeoutError):  # the caller's own pause between turns, cut by a close
                await stream.until(lambda: False, rng.uniform(0.3, 1.5))
        return None
    except (ConnectionError, ConnectionClosed):
        if stream.closed is None:
            raise
        cut = (
            asked_at is not None and (stream.closed_at or 0.0) > asked_at and stream.answers[-1].first_audio_at is None
        )
        record.closes.append(f"{stream.closed[0]} {stream.closed[1]}" + (" (mid-question)" if cut else ""))
        record.questions_lost += cut
        return stream.closed_at


async def scenario(args: argparse.Namespace) -> dict[str, Any]:
    webhook = f"{args.url.rstrip('/').replace('ws', 'http', 1)}/twilio/incoming-call"
    rng = random.Random(args.seed)
    started = time.monotonic()
    deadline = started + args.duration_s

    async def placed(index: int) -> CallRecord:
        await asyncio.sleep(args.ramp_s * index / max(args.calls, 1))  # the ramp, not synchronisation
        return await place(webhook, f"rollout{index}", deadline, random.Random(rng.random()))

    calls = asyncio.gather(*(placed(index) for index in range(args.calls)))
    await asyncio.sleep(args.at_s)  # the scenario's schedule: when the rollout comes
    disruption = {"kind": "redeploy", "at_s": round(time.monotonic() - started, 1)}
    changes = {"instructions": f"Redeployed at {time.ctime()}."}
    disruption |= await asyncio.to_thread(redeploy, args.config, changes, args.ray_address)
    records: list[CallRecord] = await calls
    gaps = [gap * 1000 for record in records for gap in record.gaps_s]
    came_back = [r for r in records if r.streams > 1 and r.answers_after_reconnect > 0 and r.failure is None]
    return {
        "calls": args.calls,
        "disruption": disruption,
        "calls_on_a_new_stream_and_answered": len(came_back),
        "calls_resumed_not_greeted_again": sum(1 for r in came_back if r.greeted_again == 0),
        "streams_per_call": sorted({r.streams for r in records}),
        "gap_to_new_stream_ms": {"count": len(gaps), "p50": percentile(gaps, 50), "p95": percentile(gaps, 95)},
        "questions_lost": sum(r.questions_lost for r in records),
        "closes": dict(Counter(close for r in records for close in r.closes)),
        "failed_calls": [r.failure for r in records if r.failure is not None],
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, url="ws://127.0.0.1:8000/v1", config=LOADTEST_CONFIG)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--at-s", type=float, default=20.0, help="when the redeploy comes, from the first call")
    parser.add_argument(
        "--ray-address",
        default="auto",
        help="the serving cluster's GCS (auto: the newest on this machine; with token auth, set RAY_AUTH_MODE=token)",
    )
    options.add(parser, duration_s=60.0, ramp_s=5.0, seed=3, out=None)


def main(args: argparse.Namespace) -> None:
    report = asyncio.run(scenario(args))
    if args.out is not None:
        Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps(report))

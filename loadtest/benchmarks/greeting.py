"""How soon a phone caller hears the agent: ``start`` to the greeting's first ``media``.

Each call is placed as Twilio places one (:class:`TwilioCall`: the voice webhook's TwiML, then
its stream); the caller listens to the greeting to its end and hangs up. ``--calls`` calls,
``--concurrency`` at a time. Prints each call's figure, then one JSON object with the p50,
p95 and max of ``start`` → first greeting audio, and of the webhook's answer → first audio
(what a caller feels after the ring: the TwiML's round trip, the stream's handshake, the
session's start and the greeting). Against ``make run`` (the CPU models, warm)::

    s2s-bench greeting --url ws://127.0.0.1:8000/v1 --calls 20
"""

import argparse
import asyncio
import json
import os
import time
from typing import Any

from loadtest import options
from loadtest.client.twilio_caller import TwilioCall
from loadtest.stats import percentile

ANSWER_TIMEOUT_S = 30.0


async def greeted(webhook: str, name: str, api_key: str | None) -> tuple[float, float]:
    """One call: (``start`` → first greeting audio, webhook asked → first greeting audio), in ms."""
    call = TwilioCall(webhook, name, api_key)
    asked_at = time.monotonic()
    async with call.stream(await call.next()) as stream:
        await stream.until(lambda: stream.answers[0].first_audio_at is not None, ANSWER_TIMEOUT_S)
        first_audio_at = stream.answers[0].first_audio_at or 0.0
        await stream.until_answered(1, ANSWER_TIMEOUT_S)
    return (first_audio_at - stream.started_at) * 1000, (first_audio_at - asked_at) * 1000


async def run(url: str, calls: int, concurrency: int, api_key: str | None) -> dict[str, Any]:
    webhook = f"{url.rstrip('/').replace('ws', 'http', 1)}/twilio/incoming-call"
    room = asyncio.Semaphore(concurrency)
    from_start: list[float] = []
    from_webhook: list[float] = []

    async def one(index: int) -> None:
        async with room:
            start_ms, webhook_ms = await greeted(webhook, f"greeting{index}-{time.time_ns()}", api_key)
        from_start.append(start_ms)
        from_webhook.append(webhook_ms)
        print(f"call {index + 1:3d}: start -> greeting {start_ms:6.1f} ms, webhook -> greeting {webhook_ms:6.1f} ms")

    await asyncio.gather(*(one(index) for index in range(calls)))
    return {
        "calls": calls,
        "concurrency": concurrency,
        "start_to_greeting_ms": {
            "p50": percentile(from_start, 50),
            "p95": percentile(from_start, 95),
            "max": round(max(from_start), 1),
        },
        "webhook_to_greeting_ms": {"p50": percentile(from_webhook, 50), "p95": percentile(from_webhook, 95)},
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(parser, url="ws://127.0.0.1:8000/v1")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=1, help="calls placed at once")
    parser.add_argument("--api-key-env", help="the variable holding the server's API key, if it has one")


def main(args: argparse.Namespace) -> None:
    api_key = os.environ[args.api_key_env] if args.api_key_env else None
    print(json.dumps(asyncio.run(run(args.url, args.calls, args.concurrency, api_key))))

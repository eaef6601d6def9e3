"""The load test's telephony mode: phone calls over the Twilio route, μ-law at 8 kHz, against
the serving-layer server (``make serve-loadtest``: synthetic engines, tone questions).

Each call is Twilio's side of a stream (:class:`TwilioCaller`), played in real time as a
phone plays it. A call hears the server's greeting to its end, then asks a question, and
hears the answer to its end (the server's ``response.done`` mark echoed), or, for a share
``--interrupt-rate`` of them, asks the next question over it: the server must ``clear`` the
call. The report gives the greeting's latency (``start`` to its first ``media``),
voice-to-voice (end of the question's audio to the answer's first ``media``), how long after
the barge-in's onset the ``clear`` came, and every call that failed, as one JSON object; run
``s2s-bench cpu`` beside it for the server's CPU per session-second, to set beside the
Realtime route's.

    s2s-bench telephony --url ws://127.0.0.1:8000/v1 --sessions 50 --duration-s 120
"""

import argparse
import asyncio
import json
import os
import random
import time
from typing import Any

from deployments.realtime.transports.wire_audio import PCMU
from handlers.audio import SPEECH_RATE, resample
from handlers.synthetic import MAX_QUESTION, question_tone
from loadtest import options
from loadtest.client.twilio_caller import TwilioCaller, stream_parameters
from loadtest.stats import percentile

QUESTION_S = 1.0
SILENCE_S = 0.8
"""After each question: the server's VAD ends the turn in this silence."""
ANSWER_TIMEOUT_S = 60.0


SILENCE = b"\xff" * int(SILENCE_S * PCMU.rate)
"""μ-law's zero."""


def mulaw_question(number: int) -> bytes:
    """A tone question as a phone sends it."""
    return PCMU.wire_bytes(resample(question_tone(number, QUESTION_S), SPEECH_RATE, PCMU.rate))


class Calls:
    """What every call measured, for the report."""

    def __init__(self) -> None:
        self.greeting_ms: list[float] = []
        """``start`` to the greeting's first ``media``."""
        self.voice_to_voice_ms: list[float] = []
        self.clear_after_onset_ms: list[float] = []
        self.answers = 0
        self.barge_ins_not_cleared = 0
        self.failures: list[str] = []


async def call(
    url: str,
    parameters: dict[str, str],
    name: str,
    deadline: float,
    interrupt_rate: float,
    rng: random.Random,
    calls: Calls,
) -> None:
    try:
        async with TwilioCaller.dial(url, parameters, name=name) as caller:
            if parameters.get("greeting") != "":  # the server greets first: the caller listens to the end
                await caller.until(lambda: caller.answers[0].first_audio_at is not None, ANSWER_TIMEOUT_S)
                calls.greeting_ms.append((caller.answers[0].first_audio_at or 0.0) * 1000 - caller.started_at * 1000)
                await caller.until_answered(1, ANSWER_TIMEOUT_S)
            while time.monotonic() < deadline:
                await caller.say(mulaw_question(rng.randint(1, MAX_QUESTION)))
                said_at = time.monotonic()  # the question's sound has all been sent, in real time
                answers = len(caller.answered())
                await caller.say(SILENCE)
                await caller.until(lambda: caller.answers[-1].first_audio_at is not None, ANSWER_TIMEOUT_S)
                first_audio_at = caller.answers[-1].first_audio_at
                assert first_audio_at is not None
                calls.voice_to_voice_ms.append((first_audio_at - said_at) * 1000)
                expected = answers + 1
                if rng.random() < interrupt_rate:  # the next question over this answer
                    clears = len(caller.clears)
                    onset = time.monotonic()
                    await caller.say(mulaw_question(rng.randint(1, MAX_QUESTION)) + SILENCE)
                    if len(caller.clears) > clears:
                        calls.clear_after_onset_ms.append((caller.clears[clears] - onset) * 1000)
                        expected += 1  # the cut answer ends, then the answer to the barge-in
                    else:
                        calls.barge_ins_not_cleared += 1
                await caller.until_answered(expected, ANSWER_TIMEOUT_S)
                calls.answers += len(caller.answered()) - answers
    except Exception as exc:  # one call's failure is reported, the others go on
        calls.failures.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")


async def run(
    url: str,
    sessions: int,
    duration_s: float,
    ramp_s: float,
    interrupt_rate: float,
    seed: int,
    api_key: str | None = None,
    greeted: bool = True,
) -> dict[str, Any]:
    """``api_key``: the server's, with which each call asks the voice webhook for its TwiML
    (whose one-use secret opens its stream), as Twilio does; ``greeted``: the calls hear the
    server's greeting first (else each asks for none)."""
    stream_url = f"{url.rstrip('/')}/twilio/media-stream"
    calls = Calls()
    deadline = time.monotonic() + ramp_s + duration_s
    rng = random.Random(seed)

    async def started(index: int) -> None:
        await asyncio.sleep(ramp_s * index / max(sessions, 1))  # the ramp, not synchronisation
        name = str(index)
        webhook = f"{url.rstrip('/').replace('ws', 'http', 1)}/twilio/incoming-call"
        try:
            parameters = await stream_parameters(webhook, name, api_key) if api_key is not None else {}
            parameters |= {} if greeted else {"greeting": ""}
        except Exception as exc:  # this call fails; the others go on
            calls.failures.append(f"{name}: the webhook: {type(exc).__name__}: {str(exc)[:200]}")
            return
        await call(stream_url, parameters, name, deadline, interrupt_rate, random.Random(rng.random()), calls)

    await asyncio.gather(*(started(index) for index in range(sessions)))
    return {
        "route": "twilio",
        "sessions": sessions,
        "duration_s": duration_s,
        "answers": calls.answers,
        "greeting_ms": {"p50": percentile(calls.greeting_ms, 50), "p95": percentile(calls.greeting_ms, 95)},
        "voice_to_voice_ms": {
            "p50": percentile(calls.voice_to_voice_ms, 50),
            "p95": percentile(calls.voice_to_voice_ms, 95),
        },
        "clear_after_barge_in_onset_ms": {
            "count": len(calls.clear_after_onset_ms),
            "p50": percentile(calls.clear_after_onset_ms, 50),
            "p99": percentile(calls.clear_after_onset_ms, 99),
        },
        "barge_ins_not_cleared": calls.barge_ins_not_cleared,
        "failed_calls": calls.failures,
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    options.add(
        parser, url="ws://127.0.0.1:8000/v1", sessions=10, duration_s=60.0, ramp_s=10.0, interrupt_rate=0.3, seed=0
    )
    parser.add_argument("--api-key-env", help="the variable holding the server's API key, if it has one")
    parser.add_argument(
        "--no-greeting", action="store_true", help="the calls ask for no greeting (a server that has none)"
    )


def main(args: argparse.Namespace) -> None:
    api_key = os.environ[args.api_key_env] if args.api_key_env else None
    arguments = (args.url, args.sessions, args.duration_s, args.ramp_s, args.interrupt_rate, args.seed, api_key)
    report = asyncio.run(run(*arguments, greeted=not args.no_greeting))
    print(json.dumps(report))

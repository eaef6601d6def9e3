"""A load test from start to report: probe, calibrate, ramp the sessions up, watch the server.

1. A probe session reads the server's model from ``session.created``: ``synthetic`` means the
   serving-layer mode, whose questions are tones; anything else gets spoken questions.
2. Calibration: the first questions that will be asked are answered once alone, so that an
   answer cut short under load can be told from one that is short by nature, and an
   interruption can be timed to land while the server is still answering.
3. The sessions start spread over ``ramp_s``; each asks its questions in its own order.
4. Meanwhile the server's ``/stats`` (sessions, replicas per deployment) is sampled, and its
   Prometheus metrics are scraped before and after, for the server's view beside ours.
"""

import argparse
import asyncio
import dataclasses
import json
import random
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from loadtest.client.metrics import settled_scrape
from loadtest.client.prompts import PromptSet, prompts_for
from loadtest.client.records import SessionLog, Turn
from loadtest.client.session import Session, TurnDetection

STATS_EVERY_S = 2.0
CALIBRATED_QUESTIONS = 8
"""Questions answered alone before the load; the others are taken to be like their median
(all of them for the spoken set, which has eight)."""
CALIBRATED_ALIKE = 2
"""The same where every answer is as long as the next (tones): one would tell them all, the
second stands in for a first that failed. Each takes ~10 s (its answer heard to the end), so
eight of them held every serving-layer run up by ~80 s."""


@dataclass(frozen=True)
class LoadConfig:
    url: str
    sessions: int
    turns: int
    interrupt_rate: float
    cancel_rate: float
    ramp_s: float
    duration_s: float | None
    seed: int
    calibrate: bool = True
    continuous_mic: bool = False
    """Silence streamed between questions too, as real clients' microphones do."""
    voiced_tones: bool = False
    """Synthetic questions with speech under each tone, for a server on the real silero VAD."""
    backchannel_rate: float = 0.0
    """Share of answers a backchannel is said over (they must play on)."""
    pause_rate: float = 0.0
    """Share of questions said with a pause mid-sentence (the server must wait for the rest)."""
    turn_detection: TurnDetection | None = None
    """What each session asks for (``None``: the server's own)."""
    noise_reduction: str | None = None
    """The ``noise_reduction`` each session asks for (``None``: none)."""
    resume: bool = False
    """Sessions resume a lost connection, and leave a draining one, with their token."""

    @classmethod
    def from_args(cls, args: argparse.Namespace, url: str, **overrides: Any) -> "LoadConfig":
        """The load a command's options describe, at the Realtime endpoint ``url``.

        Each field is read from the option of the same name where the command takes one (the
        shared ones of ``loadtest.options``: ``--sessions``, ``--turns``, ``--interrupt-rate``,
        ...), so each command passes only what its options do not say; ``overrides`` win.
        """
        given = vars(args)
        read = {field.name: given[field.name] for field in dataclasses.fields(cls) if field.name in given}
        read.pop("url", None)  # the option's ws://HOST:PORT/v1; the endpoint is the caller's
        return cls(url=url, **(read | overrides))


@dataclass
class LoadResult:
    config: LoadConfig
    prompts: PromptSet
    model: str | None
    started_at: float
    ended_at: float
    logs: list[SessionLog]
    calibrated_words: dict[int, int]
    timeline: list[dict[str, Any]]
    server_metrics: dict[str, float]
    server_scraped_after_s: float
    """How long after the run's end the server's metrics were scraped (they had caught up)."""


def http_base(url: str) -> str:
    """``ws://host:port/prefix/v1/realtime`` -> ``http://host:port/prefix``."""
    base = url.replace("wss://", "https://").replace("ws://", "http://")
    return base.removesuffix("/v1/realtime")


def server_stats(url: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"{http_base(url)}/stats", timeout=10) as reply:
            return dict(json.load(reply))
    except OSError:
        return None


async def run_load(config: LoadConfig) -> LoadResult:
    probe = await Session.uninterrupted(config.url, PromptSet("none", [], []), []).run(0, 0)
    if probe.disconnected and probe.model is None:
        raise ConnectionError(f"no Realtime server answers at {config.url}")
    prompts = prompts_for(probe.model or "", config.voiced_tones)
    rng = random.Random(config.seed)
    orders = [rng.sample(range(len(prompts.prompts)), len(prompts.prompts)) for _ in range(config.sessions)]
    asked = list(dict.fromkeys(order[t % len(order)] for t in range(config.turns + 1) for order in orders))
    calibrated: dict[int, int] = {}
    answering_s: dict[int, float] = {}
    if config.calibrate:
        count = CALIBRATED_ALIKE if prompts.answers_alike else CALIBRATED_QUESTIONS
        calibrated, answering_s = await _calibrate(config.url, prompts, asked[:count])
        _fill_with_median(calibrated, asked)
        _fill_with_median(answering_s, asked)

    stats = await asyncio.to_thread(server_stats, config.url)
    metrics_urls = (stats or {}).get("metrics_urls", [])
    # Settled too: the probe's and calibration's sessions have just ended.
    before, _ = await asyncio.to_thread(settled_scrape, metrics_urls, time.monotonic())
    total_turns = config.sessions * config.turns
    deadline = time.monotonic() + config.duration_s if config.duration_s else float("inf")
    started = time.monotonic()
    timeline: list[dict[str, Any]] = []
    with tqdm(total=total_turns, unit="turn", desc="load test", disable=None) as progress:

        def turn_ended(turn: Turn) -> None:
            progress.update(1)

        async def session(index: int) -> SessionLog:
            await asyncio.sleep(config.ramp_s * index / max(1, config.sessions))
            driver = Session(
                index,
                config.url,
                prompts,
                orders[index],
                random.Random(config.seed * 100_003 + index),
                config.interrupt_rate,
                config.cancel_rate,
                turn_ended,
                answering_s,
                continuous_mic=config.continuous_mic,
                backchannel_rate=config.backchannel_rate,
                pause_rate=config.pause_rate,
                turn_detection=config.turn_detection,
                noise_reduction=config.noise_reduction,
                resume=config.resume,
            )
            return await driver.run(config.turns, deadline)

        sampler = asyncio.ensure_future(_sample_stats(config.url, started, timeline))
        try:
            logs = await asyncio.gather(*(session(i) for i in range(config.sessions)))
        finally:
            sampler.cancel()
    ended = time.monotonic()
    after, scraped_after_s = await asyncio.to_thread(settled_scrape, metrics_urls, ended)
    server_metrics = {name: value - before.get(name, 0.0) for name, value in after.items()}
    return LoadResult(
        config, prompts, probe.model, started, ended, list(logs), calibrated, timeline, server_metrics, scraped_after_s
    )


async def _calibrate(url: str, prompts: PromptSet, numbers: list[int]) -> tuple[dict[int, int], dict[int, float]]:
    """Each question answered with nothing else running (a fresh session each): the words of
    its answer, and how long the server streams it (first audio to ``response.done``)."""
    words: dict[int, int] = {}
    answering_s: dict[int, float] = {}
    for number in tqdm(numbers, desc="calibrating", unit="question", disable=None):
        log = await Session.uninterrupted(url, prompts, [number]).run(1, float("inf"))
        response = log.turns[0].response if log.turns else None
        if response is not None and response.status == "completed" and response.first_audio_at and response.done_at:
            words[number] = len(response.transcript.split())
            answering_s[number] = response.done_at - response.first_audio_at
    return words, answering_s


def _fill_with_median(measured: dict[int, Any], numbers: list[int]) -> None:
    if measured:
        median = sorted(measured.values())[len(measured) // 2]
        for number in numbers:
            measured.setdefault(number, median)


async def _sample_stats(url: str, started: float, timeline: list[dict[str, Any]]) -> None:
    while True:
        stats = await asyncio.to_thread(server_stats, url)
        if stats is not None:
            sample = {"t": round(time.monotonic() - started, 2), "sessions": stats.get("sessions", 0)}
            timeline.append({**sample, "replicas": stats.get("replicas", {})})
        await asyncio.sleep(STATS_EVERY_S)

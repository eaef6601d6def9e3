"""Benchmark of cross-process cancel scopes: ``s2s-bench cancel``.

For each placement it measures what a worker pays per staleness check (a local read), what
a remote read would have cost instead, how long a cancel in the ingress process takes to
reach a worker process (the median of ``--runs`` runs' p99s), what each session costs the host
side, and how many sessions the worker wrongly took for stale while others were cancelled
(per 1000 cancels; must be 0). Human-readable lines first; the last line is one JSON object.
"""

import argparse
import asyncio
import json
import random
import statistics
import time
import timeit
from typing import Any, Literal

import numpy as np
import psutil
import ray
from ray.actor import ActorHandle

from cancel import ScopeCache, ScopeDirectory, ScopePlacementConfig, ScopeTicket, ScopeView, SessionScope
from cancel.host import NO_EPOCH
from loadtest import options
from loadtest.scenarios.launch import LocalServe

Placement = Literal["shared", "dedicated"]
TRIALS = 300
OPEN_BATCH = 20
REMOTE_CALLS = 300
IS_STALE_CALLS = 1_000_000


@ray.remote(num_cpus=0)
class BenchWorker:
    """A worker process: holds a view of every session and times when a cancel reaches it."""

    def __init__(self) -> None:
        self._held: dict[str, ScopeView] = {}
        self._armed: asyncio.Task[int] | None = None

    async def hold(self, tickets: list[ScopeTicket]) -> dict[str, int]:
        cache = ScopeCache.for_current_loop()
        self._held = {ticket.session_id: cache.watch(ticket) for ticket in tickets}
        return cache.stats()

    async def arm(self, ticket: ScopeTicket) -> None:
        """Start waiting for the ticket's view to turn stale."""
        view = ScopeCache.for_current_loop().watch(ticket)
        assert not view.is_stale()
        self._armed = asyncio.get_running_loop().create_task(self._observe(view))

    async def observed(self) -> int:
        """When (``time.monotonic_ns``, system-wide) the armed view turned stale."""
        assert self._armed is not None
        return await self._armed

    async def stale_held(self) -> set[str]:
        """Sessions whose held view (issued before any cancel) reports stale."""
        return {session_id for session_id, view in self._held.items() if view.is_stale()}

    async def release(self) -> dict[str, int]:
        for view in self._held.values():
            view.release()
        self._held = {}
        cache = ScopeCache.for_current_loop()
        await cache.drain()
        return cache.stats()

    @staticmethod
    async def _observe(view: ScopeView) -> int:
        with view:
            await view.wait_stale()
            return time.monotonic_ns()


async def open_sessions(directory: ScopeDirectory, count: int) -> list[SessionScope]:
    """Sessions opened a batch at a time, as clients connect, not all in one burst."""
    scopes: list[SessionScope] = []
    while len(scopes) < count:
        batch = min(OPEN_BATCH, count - len(scopes))
        scopes += await asyncio.gather(*(directory.open_session() for _ in range(batch)))
    return scopes


async def host_pids(hosts: list[ActorHandle]) -> list[int]:
    return [(await host.stats.remote())["pid"] for host in hosts]


def memory_bytes(pids: list[int], mode: Placement) -> int:
    """Host memory: RSS growth tells a shared host's cost; PSS counts whole dedicated processes."""
    if mode == "shared":
        return sum(psutil.Process(pid).memory_info().rss for pid in pids)
    return sum(psutil.Process(pid).memory_full_info().pss for pid in pids)


async def settle(hosts: set[ActorHandle]) -> None:
    """Wait until the worker's poll waits on each host used (its first answer is read)."""
    async with asyncio.timeout(60):
        for host in hosts:
            while (await host.stats.remote())["pending_polls"] != 1:
                await asyncio.sleep(0.01)


async def is_stale_ns(scope: SessionScope) -> float:
    """A view's staleness check in this process, in ns per call."""
    cache = ScopeCache.for_current_loop()
    with cache.watch(scope.ticket()) as view:
        seconds = min(timeit.repeat(view.is_stale, number=IS_STALE_CALLS, repeat=5))
    await cache.drain()
    return seconds / IS_STALE_CALLS * 1e9


async def remote_call_us(scope: SessionScope) -> list[float]:
    """What asking the host instead would cost: one staleness read per call."""
    samples: list[float] = []
    for _ in range(REMOTE_CALLS):
        start = time.perf_counter()
        await scope.host.wait_changes.remote(NO_EPOCH, 0, 0)
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


async def cancel_to_observed_ms(scopes: list[SessionScope], worker: ActorHandle, cancelled: set[str]) -> list[float]:
    """Cancels of random sessions, one at a time, as the worker process observes them."""
    samples: list[float] = []
    for _ in range(TRIALS):
        scope = random.choice(scopes)
        cancelled.add(scope.session_id)
        await worker.arm.remote(scope.ticket())
        start = time.monotonic_ns()
        scope.cancel()
        samples.append((await worker.observed.remote() - start) / 1e6)
    return samples


async def bench_size(mode: Placement, sessions: int, runs: int, result: dict[str, Any]) -> None:
    directory = await ScopeDirectory.create(ScopePlacementConfig(mode=mode))
    worker = BenchWorker.remote()  # type: ignore[attr-defined]
    before = memory_bytes(await host_pids(directory.hosts), mode)
    opened = time.perf_counter()
    scopes = await open_sessions(directory, sessions)
    opened = time.perf_counter() - opened
    stats = await worker.hold.remote([scope.ticket() for scope in scopes])
    await settle({scope.host for scope in scopes})
    pids = await host_pids(directory.hosts)
    per_session = (memory_bytes(pids, mode) - before) / sessions
    print(
        f"{mode} {sessions} sessions: opened in {opened:.2f} s, {len(set(pids))} host processes,"
        f" worker polls {stats['host_polls']}, host memory {per_session / 1024:.1f} KiB/session"
    )
    if sessions == 1:
        result["is_stale_ns"] = round(await is_stale_ns(scopes[0]), 1)
        remote = await remote_call_us(scopes[0])
        result["remote_call_us_p50"] = round(statistics.median(remote), 1)
        result["remote_call_us_p99"] = round(float(np.percentile(remote, 99)), 1)
        print(f"  is_stale {result['is_stale_ns']} ns,", end=" ")
        print(f"remote read p50 {result['remote_call_us_p50']} us, p99 {result['remote_call_us_p99']} us")
    cancelled: set[str] = set()
    p50s, p99s = [], []
    for _ in range(runs):
        samples = await cancel_to_observed_ms(scopes, worker, cancelled)
        p50s.append(statistics.median(samples))
        p99s.append(float(np.percentile(samples, 99)))
    wrongly_stale = len(await worker.stale_held.remote() - cancelled)
    p50, p99 = statistics.median(p50s), statistics.median(p99s)
    result["cancel_to_observed_ms_p50"][str(sessions)] = round(p50, 2)
    result["cancel_to_observed_ms_p99"][str(sessions)] = round(p99, 2)
    result["cancel_to_observed_ms_p99_runs"][str(sessions)] = [round(p, 2) for p in p99s]
    result["wrongly_stale_per_1000_cancels"][str(sessions)] = wrongly_stale * 1000 / (runs * TRIALS)
    result["bytes_per_session"] = round(per_session)
    result["processes_per_1000_sessions"] = round(len(set(pids)) / sessions * 1000, 1)
    print(
        f"  cancel -> observed p50 {p50:.2f} ms, p99 {p99:.2f} ms (median of {runs} runs of"
        f" {TRIALS} cancels; p99s {[round(p, 2) for p in p99s]}); wrongly stale: {wrongly_stale}"
    )
    await worker.release.remote()
    await directory.shutdown()
    ray.kill(worker)


async def bench(sizes: dict[Placement, list[int]], runs: int, dedicated_note: str) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for mode, counts in sizes.items():
        result: dict[str, Any] = {
            key: {}
            for key in (
                "cancel_to_observed_ms_p50",
                "cancel_to_observed_ms_p99",
                "cancel_to_observed_ms_p99_runs",
                "wrongly_stale_per_1000_cancels",
            )
        }
        for sessions in counts:
            await bench_size(mode, sessions, runs if mode == "shared" else 1, result)
        results[mode] = result
    results["dedicated"]["note"] = dedicated_note
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shared-sessions", type=options.positive_int, nargs="+", default=[1, 100, 1000])
    parser.add_argument("--dedicated-sessions", type=options.positive_int, nargs="+", default=[1, 100])
    parser.add_argument(
        "--runs", type=options.positive_int, default=3, help="runs per shared size; the p99 is their median"
    )


def main(args: argparse.Namespace) -> None:
    note = (
        f"stops at {max(args.dedicated_sessions)} sessions: one Ray worker process per session"
        " (~50 MB PSS, 0.25-0.5 s to start); ~275 exhausted this 24 GiB machine"
    )
    with LocalServe(serve=False):
        sizes: dict[Placement, list[int]] = {
            "shared": args.shared_sessions,
            "dedicated": args.dedicated_sessions,
        }
        results = asyncio.run(bench(sizes, args.runs, note))
    print(json.dumps(results))

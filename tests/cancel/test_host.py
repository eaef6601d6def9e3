"""ScopeHost on a real local Ray: ordered publishes and the change log's long-poll."""

import asyncio
from collections.abc import AsyncIterator

import pytest
import ray
from eventually import eventually
from ray.actor import ActorHandle

from cancel import ScopeHost
from cancel.host import NO_EPOCH

pytestmark = [pytest.mark.serve, pytest.mark.usefixtures("ray_local"), pytest.mark.timeout(60)]
"""Ray, no model: part of ``make test-serve``."""


@pytest.fixture
async def host() -> AsyncIterator[ActorHandle]:
    handle = ray.remote(ScopeHost).options(num_cpus=0, max_concurrency=100).remote()
    yield handle
    ray.kill(handle)


async def polls_pending(host: ActorHandle, count: int) -> None:
    """Wait until ``count`` polls wait on the host (async actors start calls in any order)."""
    await eventually(host.stats.remote, lambda stats: stats["pending_polls"] == count)


async def whole_log(host: ActorHandle) -> tuple[int, int, list]:
    return await host.wait_changes.remote(NO_EPOCH, 0, 0)


async def test_a_first_poll_gets_every_session_once_with_its_latest_state(host: ActorHandle) -> None:
    await host.publish.remote("a", 0, 0)
    await host.publish.remote("b", 0, 0)
    await host.publish.remote("a", 1, 1)
    epoch, seq, changes = await whole_log(host)
    assert (seq, changes) == (3, [("b", (0, 0)), ("a", (1, 1))])
    assert epoch == (await host.stats.remote())["epoch"]


async def test_publish_keeps_the_newest_version(host: ActorHandle) -> None:
    await host.publish.remote("a", 2, 2)
    await host.publish.remote("a", 1, 1)  # late: ignored, and not a change
    await host.publish.remote("a", 2, 2)  # a republish of what is stored: not a change
    assert await whole_log(host) == ((await host.stats.remote())["epoch"], 1, [("a", (2, 2))])


async def test_poll_returns_only_what_changed_since(host: ActorHandle) -> None:
    for session in "abc":
        await host.publish.remote(session, 0, 0)
    epoch, seq, _ = await whole_log(host)
    await host.publish.remote("b", 1, 1)
    assert await host.wait_changes.remote(epoch, seq, 30) == (epoch, seq + 1, [("b", (1, 1))])


async def test_poll_waits_for_the_next_change_and_wakes_every_worker(host: ActorHandle) -> None:
    await host.publish.remote("a", 0, 0)
    epoch, seq, _ = await whole_log(host)
    polls = [host.wait_changes.remote(epoch, seq, 30) for _ in range(50)]
    await polls_pending(host, 50)
    await host.publish.remote("a", 1, 1)
    assert await asyncio.gather(*polls) == [(epoch, seq + 1, [("a", (1, 1))])] * 50
    assert (await host.stats.remote())["pending_polls"] == 0


async def test_poll_times_out_empty(host: ActorHandle) -> None:
    await host.publish.remote("a", 0, 0)
    epoch, seq, _ = await whole_log(host)
    assert await host.wait_changes.remote(epoch, seq, 0.1) == (epoch, seq, [])
    assert (await host.stats.remote())["pending_polls"] == 0


async def test_close_is_logged_as_none(host: ActorHandle) -> None:
    await host.publish.remote("a", 0, 0)
    epoch, seq, _ = await whole_log(host)
    poll = host.wait_changes.remote(epoch, seq, 30)
    await polls_pending(host, 1)
    await host.close.remote("a")
    assert await poll == (epoch, seq + 1, [("a", None)])
    assert (await host.stats.remote())["sessions"] == 0


async def test_closed_sessions_kept_in_the_log_are_bounded() -> None:
    host = ray.remote(ScopeHost).options(num_cpus=0).remote(closed_kept=3)
    await host.publish.remote("live", 0, 0)
    for session in [f"s{i}" for i in range(8)]:
        await host.publish.remote(session, 0, 0)
        await host.close.remote(session)
    _, _, changes = await whole_log(host)
    assert changes == [("live", (0, 0)), ("s5", None), ("s6", None), ("s7", None)]
    ray.kill(host)


async def test_cancelled_poll_leaves_nothing_pending(host: ActorHandle) -> None:
    await host.publish.remote("a", 0, 0)
    epoch, seq, _ = await whole_log(host)
    poll = host.wait_changes.remote(epoch, seq, 30)
    await polls_pending(host, 1)
    ray.cancel(poll)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        await poll
    assert (await host.stats.remote())["pending_polls"] == 0


async def test_watch_epoch_answers_at_once_for_another_epoch(host: ActorHandle) -> None:
    epoch = await host.watch_epoch.remote(NO_EPOCH, 30)
    assert epoch == (await host.stats.remote())["epoch"]
    assert await host.watch_epoch.remote(epoch, 0.05) == epoch

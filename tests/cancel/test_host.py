"""ScopeHost on a real local Ray: ordering-safe publishes and the batched long-poll."""

import asyncio
from collections.abc import AsyncIterator

import pytest
import ray
from eventually import eventually
from ray.actor import ActorHandle

from cancel import ScopeHost, make_token

pytestmark = [pytest.mark.usefixtures("ray_local"), pytest.mark.timeout(60)]


@pytest.fixture
async def host() -> AsyncIterator[ActorHandle]:
    handle = ray.remote(ScopeHost).options(num_cpus=0, max_concurrency=100).remote()
    yield handle
    ray.kill(handle)


async def polls_pending(host: ActorHandle, count: int) -> None:
    """Wait until ``count`` polls wait on the host (async actors start calls in any order)."""
    await eventually(host.stats.remote, lambda stats: stats["pending_polls"] == count)


async def test_open_is_idempotent_and_returns_the_epoch(host: ActorHandle) -> None:
    epoch = await host.open.remote("a")
    await host.publish.remote("a", 1, make_token(epoch, 1))
    assert await host.open.remote("a") == epoch
    assert await host.wait_changes.remote({"a": 0}, 0) == {"a": (1, make_token(epoch, 1))}
    assert (await host.stats.remote())["sessions"] == 1


async def test_publish_keeps_the_newest_version(host: ActorHandle) -> None:
    epoch = await host.open.remote("a")
    assert await host.publish.remote("a", 2, make_token(epoch, 2))
    assert await host.publish.remote("a", 1, make_token(epoch, 1))  # late: ignored
    assert await host.wait_changes.remote({"a": 0}, 0) == {"a": (2, make_token(epoch, 2))}


async def test_publish_to_an_unknown_session_says_so(host: ActorHandle) -> None:
    assert not await host.publish.remote("nobody", 1, 1)
    assert (await host.stats.remote())["sessions"] == 0


async def test_poll_reports_unknown_sessions_as_none_at_once(host: ActorHandle) -> None:
    assert await host.wait_changes.remote({"nobody": 0}, 30) == {"nobody": None}


async def test_poll_times_out_empty_and_leaves_no_waiter(host: ActorHandle) -> None:
    await host.open.remote("a")
    assert await host.wait_changes.remote({"a": 0}, 0.1) == {}
    assert (await host.stats.remote())["pending_polls"] == 0


async def test_poll_waits_for_a_publish_and_batches_sessions(host: ActorHandle) -> None:
    epoch = await host.open.remote("a")
    await host.open.remote("b")
    poll = host.wait_changes.remote({"a": 0, "b": 0}, 30)
    await polls_pending(host, 1)
    await host.publish.remote("b", 1, make_token(epoch, 1))
    assert await poll == {"b": (1, make_token(epoch, 1))}
    assert (await host.stats.remote())["pending_polls"] == 0


async def test_poll_ahead_of_the_host_waits_for_the_publish(host: ActorHandle) -> None:
    """A ticket may carry a version still in flight to the host: that is not a change."""
    epoch = await host.open.remote("a")
    poll = host.wait_changes.remote({"a": 1}, 30)
    await polls_pending(host, 1)
    await host.publish.remote("a", 1, make_token(epoch, 1))
    await polls_pending(host, 1)
    await host.publish.remote("a", 2, make_token(epoch, 2))
    assert await poll == {"a": (2, make_token(epoch, 2))}


async def test_close_wakes_polls_with_none(host: ActorHandle) -> None:
    await host.open.remote("a")
    poll = host.wait_changes.remote({"a": 0}, 30)
    await polls_pending(host, 1)
    await host.close.remote("a")
    assert await poll == {"a": None}
    assert (await host.stats.remote())["sessions"] == 0


async def test_cancelled_poll_leaves_no_waiter(host: ActorHandle) -> None:
    await host.open.remote("a")
    poll = host.wait_changes.remote({"a": 0}, 30)
    await polls_pending(host, 1)
    ray.cancel(poll)
    with pytest.raises(ray.exceptions.TaskCancelledError):
        await poll
    assert (await host.stats.remote())["pending_polls"] == 0


async def test_many_polls_wait_concurrently(host: ActorHandle) -> None:
    epoch = await host.open.remote("a")
    polls = [host.wait_changes.remote({"a": 0}, 30) for _ in range(50)]
    await polls_pending(host, 50)
    await host.publish.remote("a", 1, make_token(epoch, 1))
    assert await asyncio.gather(*polls) == [{"a": (1, make_token(epoch, 1))}] * 50

"""The worker cache's timeouts: long-polls that time out are renewed; a silent host is lost."""

import asyncio

import pytest
import ray
from scope_worker import ScopeWorker, SilentHost

from cancel import ScopeDirectory, ScopeTicket, make_token

pytestmark = [pytest.mark.usefixtures("ray_local"), pytest.mark.timeout(60)]

POLL_TIMEOUT_S = 0.2


async def test_polls_that_time_out_are_renewed(shared_directory: ScopeDirectory) -> None:
    worker = ScopeWorker.remote(poll_timeout_s=POLL_TIMEOUT_S)
    scope = await shared_directory.open_session()
    await worker.watch.remote({"r": scope.ticket()})
    await asyncio.sleep(5 * POLL_TIMEOUT_S)  # let several polls time out empty
    assert await worker.stale.remote() == {"r": False}
    observed = worker.observe.remote("r")
    scope.cancel()
    async with asyncio.timeout(2):  # seen by a renewed poll, not after a long wait
        await observed
    ray.kill(worker)


async def test_a_host_that_stops_answering_turns_views_stale() -> None:
    host = SilentHost.remote()
    epoch = await host.open.remote("s")
    token = make_token(epoch, 0)
    worker = ScopeWorker.remote(poll_timeout_s=POLL_TIMEOUT_S, poll_grace_s=POLL_TIMEOUT_S)
    assert await worker.watch.remote({"r": ScopeTicket("s", host, 0, token, token)}) == {"r": False}
    async with asyncio.timeout(5):
        await worker.observe.remote("r")
    assert (await worker.cache_stats.remote())["host_polls"] == 0
    ray.kill(worker)
    ray.kill(host)

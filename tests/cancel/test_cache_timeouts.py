"""The worker cache's timeouts: polls that time out are renewed; a silent host stops nothing."""

import asyncio

import pytest
import ray
from eventually import eventually
from scope_worker import ScopeWorker, SilentHost

from cancel import ScopeDirectory, ScopeTicket

pytestmark = [pytest.mark.serve, pytest.mark.usefixtures("ray_local"), pytest.mark.timeout(60)]
"""Ray, no model: part of ``make test-serve``."""

POLL_TIMEOUT_S = 0.2


async def test_polls_that_time_out_are_renewed(shared_directory: ScopeDirectory) -> None:
    worker = ScopeWorker.remote(poll_timeout_s=POLL_TIMEOUT_S)
    scope = await shared_directory.open_session()
    await worker.watch.remote({"r": scope.ticket()})
    seq = (await scope.host.stats.remote())["seq"]
    # Let several polls time out empty: the host's change log has not moved meanwhile.
    await eventually(scope.host.stats.remote, lambda s: s["pending_polls"] == 1)
    await asyncio.sleep(5 * POLL_TIMEOUT_S)  # the time that passes is what is under test
    assert (await scope.host.stats.remote())["seq"] == seq
    assert await worker.stale.remote() == {"r": False}
    observed = worker.observe.remote("r")
    scope.cancel()
    async with asyncio.timeout(2):  # seen by a renewed poll, not after a long wait
        await observed
    ray.kill(worker)


async def test_a_host_that_stops_answering_does_not_stop_work() -> None:
    """The cache cannot vouch for the session, so the work goes on (the writer still can stop
    it); the poll is re-sent, with backoff, until the host answers."""
    host = SilentHost.remote()
    await host.publish.remote("s", 0, 0)
    worker = ScopeWorker.remote(poll_timeout_s=POLL_TIMEOUT_S, poll_grace_s=POLL_TIMEOUT_S)
    assert await worker.watch.remote({"r": ScopeTicket("s", host, 0, 0, 0)}) == {"r": False}
    steps = await worker.generate.remote("r", 0.01, 20 * POLL_TIMEOUT_S)
    assert steps > 100  # never stopped: 4 s of "tokens" while every poll went unanswered
    assert (await worker.cache_stats.remote())["host_polls"] == 1
    ray.kill(worker)
    ray.kill(host)

"""Fixtures of the cancel tests: scope directories of both placements and a worker process."""

from collections.abc import AsyncIterator

import pytest
import ray
from ray.actor import ActorHandle
from scope_worker import ScopeWorker

from cancel import ScopeDirectory, ScopePlacementConfig


@pytest.fixture(params=["shared", "dedicated"])
async def directory(request: pytest.FixtureRequest, ray_local: None) -> AsyncIterator[ScopeDirectory]:
    directory = await ScopeDirectory.create(ScopePlacementConfig(mode=request.param))
    yield directory
    await directory.shutdown()


@pytest.fixture
async def shared_directory(ray_local: None) -> AsyncIterator[ScopeDirectory]:
    directory = await ScopeDirectory.create(ScopePlacementConfig(num_hosts=2))
    yield directory
    await directory.shutdown()


@pytest.fixture
async def worker(ray_local: None) -> AsyncIterator[ActorHandle]:
    """A ScopeWorker actor: its own process, hence its own ScopeCache."""
    handle = ScopeWorker.remote()
    yield handle
    ray.kill(handle)

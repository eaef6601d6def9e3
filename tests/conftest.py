"""Shared fixtures: one real local Ray cluster for the whole test session.

Ray takes seconds to start, so every test that needs it shares this one instead of
starting its own.
"""

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()

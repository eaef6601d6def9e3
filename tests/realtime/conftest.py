"""The session's parts on fake stages: no Ray cluster and no model, so every test here is
part of ``make test-fast``."""

from collections.abc import Iterator
from typing import Any

import pytest
from blocking_records import BlockingRedisRecords

from deployments.session_store.ray_records import SessionRecords

WINDOW_S = 300.0


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name == "realtime":
            item.add_marker(pytest.mark.fast)


@pytest.fixture(params=["ray", "redis"])
def new_records(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Makes empty stores of one kind: the ``ray`` store's rules, or a Redis server's."""
    made: list[BlockingRedisRecords] = []

    def make(window_s: float = WINDOW_S) -> Any:
        if request.param == "ray":
            return SessionRecords(window_s)
        made.append(BlockingRedisRecords(request.getfixturevalue("redis_server").url, window_s))
        return made[-1]

    yield make
    for records in made:
        records.close()

"""The session's parts on fake stages: no Ray cluster and no model, so every test here is
part of ``make test-fast``."""

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.parent.name == "realtime":
            item.add_marker(pytest.mark.fast)

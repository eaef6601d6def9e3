"""The replica's shared scope directory: one creation for every session, a failed one tried
again by the next session, and never started by a look at it."""

import asyncio

import pytest

from cancel import ScopeDirectory, ScopePlacementConfig
from deployments import scope_directory
from deployments.scope_directory import SharedScopeDirectory

pytestmark = pytest.mark.fast


async def test_one_creation_serves_every_session_and_a_failed_one_is_tried_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = object()
    attempts: list[int] = []

    async def create(config: ScopePlacementConfig) -> object:
        attempts.append(len(attempts))
        if len(attempts) == 1:
            raise RuntimeError("no scope host could start")
        return built

    monkeypatch.setattr(scope_directory.ScopeDirectory, "create", create)
    shared = SharedScopeDirectory(ScopePlacementConfig())
    assert shared.built() is None and attempts == [], "a look starts nothing"
    with pytest.raises(RuntimeError):
        await shared.get()
    assert shared.failed() and shared.built() is None
    assert await asyncio.gather(shared.get(), shared.get()) == [built, built]
    assert len(attempts) == 2, "the sessions shared one creation"
    assert shared.built() is built and not shared.failed()
    assert await shared.get() is built and len(attempts) == 2


async def test_the_creation_outlives_the_session_that_started_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cancelling the first session's request must not cancel what every session shares."""
    started = asyncio.Event()

    async def create(config: ScopePlacementConfig) -> ScopeDirectory:
        started.set()
        await asyncio.sleep(0.05)
        return ScopeDirectory(config, [])

    monkeypatch.setattr(scope_directory.ScopeDirectory, "create", create)
    shared = SharedScopeDirectory(ScopePlacementConfig())

    async def first_session() -> None:
        await shared.get()

    request = asyncio.ensure_future(first_session())
    await started.wait()
    request.cancel()
    assert isinstance(await shared.get(), ScopeDirectory) and not shared.failed()

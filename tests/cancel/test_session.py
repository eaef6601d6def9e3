"""The writer side: SessionScope publishing through a ScopeDirectory (real local Ray)."""

import asyncio

import pytest

from cancel import ScopeDirectory, ScopePlacementConfig, SessionScope
from cancel.host import NO_EPOCH

pytestmark = [pytest.mark.serve, pytest.mark.timeout(60)]
"""Ray, no model: part of ``make test-serve``."""


async def test_cancel_is_local_at_once_and_published_in_order(directory: ScopeDirectory) -> None:
    scope = await directory.open_session()
    gens = [scope.cancel() for _ in range(20)]
    assert gens == list(range(1, 21))
    assert scope.version == 20
    await scope.flush()
    assert await host_state(scope) == (20, 20)


async def test_ticket_carries_the_writer_state(directory: ScopeDirectory) -> None:
    scope = await directory.open_session()
    scope.cancel()
    ticket = scope.ticket()
    assert (ticket.session_id, ticket.host, ticket.version) == (scope.session_id, scope.host, 1)
    assert ticket.generation == ticket.current == scope.generation == 1
    old = scope.ticket(0)
    assert (old.generation, old.current) == (0, 1)


async def test_session_ids_are_unguessable_and_sharded_over_the_pool(
    shared_directory: ScopeDirectory,
) -> None:
    scopes = await asyncio.gather(*(shared_directory.open_session() for _ in range(50)))
    assert len({scope.session_id for scope in scopes}) == 50
    assert all(len(scope.session_id) >= 22 for scope in scopes)  # 128 random bits
    assert {scope.host for scope in scopes} == set(shared_directory.hosts)
    counts = [(await host.stats.remote())["sessions"] for host in shared_directory.hosts]
    assert sorted(counts) == sorted(sum(scope.host == host for scope in scopes) for host in shared_directory.hosts)


async def test_dedicated_placement_gives_each_session_its_own_host(ray_local: None) -> None:
    directory = await ScopeDirectory.create(ScopePlacementConfig(mode="dedicated"))
    assert directory.hosts == []
    scopes = await asyncio.gather(directory.open_session(), directory.open_session())
    assert len({scope.host for scope in scopes}) == 2 == len(directory.hosts)
    assert directory.open_sessions == 2
    await scopes[0].close()
    assert directory.hosts == [scopes[1].host]
    assert directory.open_sessions == 1
    await directory.shutdown()
    assert directory.hosts == []


async def test_close_is_idempotent_and_forgets_the_session(
    shared_directory: ScopeDirectory,
) -> None:
    scope = await shared_directory.open_session()
    assert shared_directory.open_sessions == 1
    scope.cancel()
    await scope.close()
    await scope.close()
    assert shared_directory.open_sessions == 0
    await scope.flush()  # nothing left to publish
    assert await host_state(scope) is None


async def host_state(scope: SessionScope) -> tuple[int, int] | None:
    """What the session's host holds for it (its latest entry in the host's log)."""
    _, _, changes = await scope.host.wait_changes.remote(NO_EPOCH, 0, 0)
    return dict(changes)[scope.session_id]

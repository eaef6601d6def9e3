"""A request that Serve cancels must not disturb other requests of the same replica.

Serve cancels a stream with ``ray.cancel``, which is recursive: Ray tasks started on behalf of
the cancelled request are cancelled with it. The worker's shared long-poll of a scope host must
therefore not belong to whichever request happened to start it (real local Ray and Serve).
"""

import asyncio
from collections.abc import AsyncIterator

import pytest
from eventually import eventually
from ray import serve
from ray.serve.handle import DeploymentHandle

from cancel import ScopeCache, ScopeDirectory, ScopePlacementConfig, ScopeTicket, ScopeView

pytestmark = [pytest.mark.serve, pytest.mark.timeout(120)]
"""Ray, no model: part of ``make test-serve``."""


@serve.deployment(max_ongoing_requests=100)
class ScopeFollower:
    """A stand-in for an LLM/TTS replica: each request watches its session's scope."""

    def __init__(self) -> None:
        self._views: dict[str, ScopeView] = {}

    async def follow(self, ticket: ScopeTicket) -> AsyncIterator[str]:
        """Yield "watching", then "stale" once the view turns stale (or run until cancelled)."""
        with ScopeCache.for_current_loop().watch(ticket) as view:
            self._views[ticket.session_id] = view
            try:
                yield "watching"
                await view.wait_stale()
                yield "stale"
            finally:
                del self._views[ticket.session_id]

    def stale(self) -> dict[str, bool]:
        """Staleness of every view held right now, by session id."""
        return {session_id: view.is_stale() for session_id, view in self._views.items()}


@pytest.fixture(scope="module")
async def follower(serve_port: int) -> AsyncIterator[DeploymentHandle]:
    handle = serve.run(ScopeFollower.bind(), name="scope-follower", route_prefix=None)
    yield handle
    serve.delete("scope-follower")


@pytest.mark.parametrize("round_", range(3))
async def test_a_request_cancelled_by_serve_leaves_other_views_fresh(follower: DeploymentHandle, round_: int) -> None:
    directory = await ScopeDirectory.create(ScopePlacementConfig(num_hosts=1))
    victim, cancelled, *bystanders = await asyncio.gather(*(directory.open_session() for _ in range(5)))
    streams = {}
    # The victim's request is the first to watch the host, so on a fresh replica it is the
    # request that starts the replica's poll of that host.
    for scope in (victim, cancelled, *bystanders):
        stream = follower.options(stream=True).follow.remote(scope.ticket())
        assert await anext(stream) == "watching"
        streams[scope.session_id] = stream

    streams.pop(victim.session_id).cancel()  # what the ingress does on barge-in
    await eventually(follower.stale.remote, lambda views: victim.session_id not in views)

    cancelled.cancel()  # proves the replica still hears its host after the victim's end
    assert await anext(streams.pop(cancelled.session_id)) == "stale"
    assert await follower.stale.remote() == {scope.session_id: False for scope in bystanders}

    for stream in streams.values():
        stream.cancel()
    await directory.shutdown()

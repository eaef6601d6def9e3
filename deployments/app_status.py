"""This application's Serve status: fresh for the ingress's shutdown watch, cached for ``/stats``."""

import asyncio

from ray import serve
from ray.serve.schema import ApplicationStatusOverview

from cancel import spawn_detached


class AppStatus:
    """This application's Serve status, fetched at most once per ``max_age_s``.

    A ``serve.status()`` call costs ~50 ms of CPU (it rebuilds every deployment's config), so
    ``/stats`` callers share one cached answer instead of paying per call. The shutdown watch
    fetches its own each poll: a cached answer could be a poll older than the replica's drain.
    """

    def __init__(self, max_age_s: float) -> None:
        self._max_age_s = max_age_s
        self._fetched_at = -max_age_s
        self._fetching: asyncio.Future[ApplicationStatusOverview | None] | None = None

    async def get(self) -> "ApplicationStatusOverview | None":
        now = asyncio.get_running_loop().time()
        if self._fetching is None or (self._fetching.done() and now - self._fetched_at >= self._max_age_s):
            self._fetched_at = now
            # Shared by every caller, so owned by none: a cancelled request must not fail it.
            self._fetching = spawn_detached(asyncio.to_thread(fetch_app_status))
        return await asyncio.shield(self._fetching)


def fetch_app_status() -> "ApplicationStatusOverview | None":
    return serve.status().applications.get(serve.get_replica_context().app_name)

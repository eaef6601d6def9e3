"""Which model deployments have no running replica, so that their calls fail at once.

When the only replica of a model deployment dies (the CPU profile runs one LLM), Serve's
router keeps the next calls waiting for the replacement, which for vLLM takes half a
minute: each question would wait the whole stage timeout and fail ``llm_timeout``. The
watch learns of the death from the call it failed (a ``RayActorError`` names the dead actor),
then asks the controller which replicas of that deployment run: if none but the dead ones,
the stage is *down* and every call to it fails at once, ``{stage}_unavailable``, until the
controller reports a running replica again. A deployment with another live replica (two TTS
replicas) is never down: its calls fail over (``realtime.failover``).

One watch per ingress replica, shared by its sessions; it asks the controller only while a
stage is suspected or down, every ``poll_s``.
"""

import asyncio
import logging
from collections.abc import Callable

from cancel import spawn_detached
from deployments.app_status import running_actor_ids
from deployments.realtime.failover import lost_replica
from deployments.realtime.failures import StageName

logger = logging.getLogger(__name__)

RunningActors = Callable[[], dict[str, set[str]]]


class ReplicaWatch:
    def __init__(self, deployments: dict[StageName, str], poll_s: float, running: RunningActors | None = None) -> None:
        """``deployments``: each watched stage's deployment name; ``running``: the running
        replicas' actor ids per deployment (default: this application's, from the controller)."""
        self._deployments = deployments
        self._poll_s = poll_s
        self._running = running or running_actor_ids
        self._dead: dict[StageName, set[str]] = {}
        """Per suspected stage, the actor ids of its replicas seen dying."""
        self._down: set[StageName] = set()
        self._polling: asyncio.Task[None] | None = None

    def down(self, stage: StageName) -> bool:
        return stage in self._down

    @property
    def down_stages(self) -> list[StageName]:
        return sorted(self._down)

    def failed(self, stage: StageName, exc: Exception) -> None:
        lost = lost_replica(exc)
        if lost is None or stage not in self._deployments:
            return
        dead = self._dead.setdefault(stage, set())
        if lost.actor_id is not None:
            dead.add(lost.actor_id)
        if self._polling is None or self._polling.done():
            # Shared by every session of the replica, so owned by none of their requests.
            self._polling = spawn_detached(self._poll())

    async def _poll(self) -> None:
        while self._dead:
            try:
                running = await asyncio.to_thread(self._running)
            except Exception as exc:  # the controller is unreachable: decide nothing, look again
                logger.warning("replica watch: the Serve controller did not answer: %r", exc)
            else:
                self._decide(running)
            if self._dead:
                await asyncio.sleep(self._poll_s)

    def _decide(self, running: dict[str, set[str]]) -> None:
        for stage, dead in list(self._dead.items()):
            alive = running.get(self._deployments[stage], set()) - dead
            if alive:
                if stage in self._down:
                    logger.warning("replica watch: %s has a running replica again", stage)
                self._down.discard(stage)
                del self._dead[stage]
            elif stage not in self._down:
                logger.warning("replica watch: %s has no running replica; its calls fail at once", stage)
                self._down.add(stage)

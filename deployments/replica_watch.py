"""Which model deployments have no running replica, so that their calls fail at once.

When the only replica of a model deployment dies (the CPU profile runs one LLM), Serve's
router keeps the next calls waiting for the replacement, which for vLLM takes half a
minute: each question would wait the whole stage timeout and fail ``llm_timeout``. The
watch suspects a stage when a call to it fails because its replica actor died (a
``RayActorError`` names the dead actor), or when a call has had no first output for
``poll_s`` (:meth:`ReplicaWatch.slow`: a replica that died while no call was in flight fails
no call, and Serve's router queues the next ones for the replacement). It then asks the
controller which replicas of that deployment run, less those Ray's GCS already knows dead
(the controller learns of a death only at its next health check, up to 10 s later): if none,
the stage is *down* and every call to it fails at once, ``{stage}_unavailable``, until a
replica runs again. A deployment with another live replica (two TTS replicas) is never
down: its calls fail over (``realtime.failover``).

One watch per ingress replica, shared by its sessions; it asks the controller only while a
stage is suspected or down, every ``poll_s``, and a slow call at most once per ``poll_s``
per stage: when every replica answers promptly it asks nothing.
"""

import asyncio
import logging
import math
from collections.abc import Callable

import ray._private.state

from cancel import spawn_detached
from deployments.app_status import running_actor_ids
from deployments.realtime.failures import StageName
from deployments.realtime.response.failover import lost_replica

logger = logging.getLogger(__name__)

RunningActors = Callable[[], dict[str, set[str]]]
LiveActors = Callable[[set[str]], set[str]]


def alive_in_gcs(actor_ids: set[str]) -> set[str]:
    """Those of ``actor_ids`` that Ray's GCS holds alive: it marks an actor dead as soon as
    its process is gone. (``ray._private.state`` reads the GCS's actor table directly; the
    public state API needs the dashboard.)"""
    return {actor_id for actor_id in actor_ids if ray._private.state.actors(actor_id).get("State") == "ALIVE"}


class ReplicaWatch:
    def __init__(
        self,
        deployments: dict[StageName, str],
        poll_s: float,
        running: RunningActors | None = None,
        alive: LiveActors | None = None,
    ) -> None:
        """``deployments``: each watched stage's deployment name; ``running``: the running
        replicas' actor ids per deployment (default: this application's, from the controller);
        ``alive``: which of some actor ids still live (default: the GCS's view)."""
        self._deployments = deployments
        self._poll_s = poll_s
        self._running = running or running_actor_ids
        self._alive = alive or alive_in_gcs
        self._dead: dict[StageName, set[str]] = {}
        """Per suspected stage, the actor ids of its replicas seen dying (none when a slow
        call made it suspected)."""
        self._down: set[StageName] = set()
        self._up_at: dict[StageName, float] = {}
        """When each stage was last found to have a running replica."""
        self._verdicts: dict[StageName, list[asyncio.Future[bool]]] = {}
        """Slow calls' questions, answered at the next decision on their stage."""
        self._polling: asyncio.Task[None] | None = None

    @property
    def suspect_after_s(self) -> float:
        """How long a call may wait for its first output before its stage is suspected."""
        return self._poll_s

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
        self._watch()

    def slow(self, stage: StageName) -> "asyncio.Future[bool]":
        """A call to ``stage`` has had no first output for :attr:`suspect_after_s`: whether
        the stage is down, at once if known (down, or found up within ``poll_s``), else once
        the controller has been asked."""
        verdict = asyncio.get_running_loop().create_future()
        now = asyncio.get_running_loop().time()
        if (
            stage not in self._deployments
            or stage in self._down
            or now - self._up_at.get(stage, -math.inf) < self._poll_s
        ):
            verdict.set_result(stage in self._down)
            return verdict
        self._verdicts.setdefault(stage, []).append(verdict)
        self._dead.setdefault(stage, set())
        self._watch()
        return verdict

    def _watch(self) -> None:
        if self._polling is None or self._polling.done():
            # Shared by every session of the replica, so owned by none of their requests.
            self._polling = spawn_detached(self._poll())

    async def _poll(self) -> None:
        while self._dead:
            names = {self._deployments[stage] for stage in self._dead}
            try:
                running = await asyncio.to_thread(self._running_of, names)
            except Exception as exc:  # the controller is unreachable: decide nothing, look again
                logger.warning("replica watch: the Serve controller did not answer: %r", exc)
            else:
                self._decide(running)
            if self._dead:
                await asyncio.sleep(self._poll_s)

    def _running_of(self, names: set[str]) -> dict[str, set[str]]:
        """The live running replicas of deployments ``names``, by actor id."""
        running = self._running()
        return {name: self._alive(running.get(name, set())) for name in names}

    def _decide(self, running: dict[str, set[str]]) -> None:
        now = asyncio.get_running_loop().time()
        for stage, dead in list(self._dead.items()):
            name = self._deployments[stage]
            if name not in running:  # suspected while the controller was being asked
                continue
            if running[name] - dead:
                if stage in self._down:
                    logger.warning("replica watch: %s has a running replica again", stage)
                self._down.discard(stage)
                self._up_at[stage] = now
                del self._dead[stage]
            elif stage not in self._down:
                logger.warning("replica watch: %s has no running replica; its calls fail at once", stage)
                self._down.add(stage)
            for verdict in self._verdicts.pop(stage, []):
                if not verdict.done():
                    verdict.set_result(stage in self._down)

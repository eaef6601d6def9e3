"""A model deployment whose only replica died fails its calls at once, ``{stage}_unavailable``,
until the controller reports a running replica again; one with another live replica never
does (its calls fail over). The controller is a function the test controls; the sessions'
side is the real ``BoundedStages`` on fake stages."""

import asyncio

import pytest
from fakes import FakeScope, FakeStages
from ray.exceptions import RayActorError, RayTaskError

from deployments.messages import LLMRequest
from deployments.realtime.failures import StageFailure
from deployments.realtime.stages import BoundedStages
from deployments.replica_watch import ReplicaWatch

DEPLOYMENTS = {"llm": "LLM", "tts": "TTS"}


class Controller:
    """Running replicas' actor ids per deployment, as the test sets them; each question is
    an event the test can wait on."""

    def __init__(self, running: dict[str, set[str]]) -> None:
        self.running = running
        self.asked = 0
        self.answered = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def __call__(self) -> dict[str, set[str]]:
        self.asked += 1
        self._loop.call_soon_threadsafe(self.answered.set)
        return {name: set(ids) for name, ids in self.running.items()}

    async def asked_again(self) -> None:
        """Until the watch asks once more: it decided on every answer before this one (it
        decides on an answer, then sleeps, then asks)."""
        asked = self.asked
        while self.asked < asked + 2:
            self.answered.clear()
            await self.answered.wait()


async def stopped_watching(watch: ReplicaWatch) -> None:
    """Until the watch has decided nothing is suspected any more (its poll has ended)."""
    assert watch._polling is not None
    await asyncio.wait_for(asyncio.shield(watch._polling), 5)


async def test_the_only_replica_dying_fails_calls_at_once_until_a_replacement_runs() -> None:
    controller = Controller({"LLM": {"a1"}, "TTS": {"t1", "t2"}})  # the dead replica still listed
    watch = ReplicaWatch(DEPLOYMENTS, poll_s=0.01, running=controller)
    watch.failed("llm", RayActorError(actor_id="a1"))
    await controller.asked_again()
    assert watch.down("llm") and watch.down_stages == ["llm"]

    stages = FakeStages()
    bounded = BoundedStages(stages, timeout_s=30, watch=watch)
    request = LLMRequest([{"role": "user", "content": "Hi."}], FakeScope("s").ticket(), "resp_1")
    stream = bounded.generate(request)
    with pytest.raises(StageFailure) as failure:
        async for _ in stream:
            pass
    assert failure.value.code == "llm_unavailable" and "/readyz" in failure.value.message
    assert stages.llm_streams[0].cancelled, "the call waiting for a replica is withdrawn"
    with pytest.raises(StageFailure, match="no running replica"):
        await bounded.fit([{"role": "user", "content": "Hi."}])

    controller.running["LLM"] = {"a2"}  # Serve's replacement runs
    await stopped_watching(watch)
    assert not watch.down("llm")
    assert await bounded.fit([{"role": "user", "content": "Hi."}]) == 0


async def test_a_replica_dying_beside_a_live_one_never_marks_its_stage_down() -> None:
    controller = Controller({"LLM": {"a1"}, "TTS": {"t1", "t2"}})
    watch = ReplicaWatch(DEPLOYMENTS, poll_s=0.01, running=controller)
    watch.failed("tts", RayActorError(actor_id="t1"))
    await stopped_watching(watch)
    assert not watch.down("tts") and controller.asked == 1


def test_a_models_own_error_is_no_replica_lost() -> None:
    watch = ReplicaWatch(DEPLOYMENTS, poll_s=0.01, running=dict)
    watch.failed("llm", RayTaskError("stream", "traceback", RayActorError(actor_id="a1")))
    watch.failed("llm", ValueError("bad request"))
    assert watch.down_stages == []

"""A model deployment whose only replica died fails its calls at once, ``{stage}_unavailable``,
until the controller reports a running replica again; one with another live replica never
does (its calls fail over). A replica that died while no call was in flight is found by the
next call that waits for its first output. The controller and the GCS are functions the test
controls; the sessions' side is the real ``BoundedStages`` on fake stages."""

import asyncio
from collections.abc import AsyncIterator

import numpy as np
import pytest
from fakes import FakeScope, FakeStages
from ray.exceptions import RayActorError, RayTaskError

from deployments.messages import LLMRequest
from deployments.realtime.failures import StageFailure
from deployments.realtime.stages import BoundedStages
from deployments.replica_watch import ReplicaWatch

DEPLOYMENTS = {"llm": "LLM", "tts": "TTS", "stt": "STT"}


class Controller:
    """Running replicas' actor ids per deployment, as the test sets them, and those the GCS
    knows dead (``dead``: the controller learns of a death only at its next health check);
    each question is an event the test can wait on."""

    def __init__(self, running: dict[str, set[str]], dead: set[str] | None = None) -> None:
        self.running = running
        self.dead = dead or set()
        self.asked = 0
        self.answered = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def __call__(self) -> dict[str, set[str]]:
        self.asked += 1
        self._loop.call_soon_threadsafe(self.answered.set)
        return {name: set(ids) for name, ids in self.running.items()}

    def alive(self, actor_ids: set[str]) -> set[str]:
        return actor_ids - self.dead

    def watch(self, poll_s: float) -> ReplicaWatch:
        return ReplicaWatch(DEPLOYMENTS, poll_s, running=self, alive=self.alive)

    async def asked_again(self) -> None:
        """Until the watch asks once more: it decided on every answer before this one (it
        decides on an answer, then sleeps, then asks)."""
        asked = self.asked
        while self.asked < asked + 2:
            self.answered.clear()
            await self.answered.wait()


def question() -> LLMRequest:
    return LLMRequest([{"role": "user", "content": "Hi."}], FakeScope("s").ticket(), "resp_1")


async def answer(stream: AsyncIterator[object]) -> list[object]:
    return [item async for item in stream]


async def stopped_watching(watch: ReplicaWatch) -> None:
    """Until the watch has decided nothing is suspected any more (its poll has ended)."""
    assert watch._polling is not None
    await asyncio.wait_for(asyncio.shield(watch._polling), 5)


async def test_the_only_replica_dying_fails_calls_at_once_until_a_replacement_runs() -> None:
    controller = Controller({"LLM": {"a1"}, "TTS": {"t1", "t2"}})  # the dead replica still listed
    watch = controller.watch(poll_s=0.01)
    watch.failed("llm", RayActorError(actor_id="a1"))
    await controller.asked_again()
    assert watch.down("llm") and watch.down_stages == ["llm"]

    stages = FakeStages()
    bounded = BoundedStages(stages, timeout_s=30, watch=watch)
    stream = bounded.generate(question())
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
    watch = controller.watch(poll_s=0.01)
    watch.failed("tts", RayActorError(actor_id="t1"))
    await stopped_watching(watch)
    assert not watch.down("tts") and controller.asked == 1


def test_a_models_own_error_is_no_replica_lost() -> None:
    watch = ReplicaWatch(DEPLOYMENTS, poll_s=0.01, running=dict)
    watch.failed("llm", RayTaskError("stream", "traceback", RayActorError(actor_id="a1")))
    watch.failed("llm", ValueError("bad request"))
    assert watch.down_stages == []


async def test_a_replica_that_died_between_calls_fails_the_next_call_at_once_until_a_replacement_runs() -> None:
    """The only LLM replica died while no call was in flight: no call failed, and the
    controller still lists it (only the GCS knows). The next question, queued by Serve for the
    replacement, waits ``poll_s`` for its first output, then fails ``llm_unavailable`` and is
    withdrawn, not after the stage timeout; the stage is down, so the next fails without
    waiting; once a replica runs, questions are answered."""
    controller = Controller({"LLM": {"a1"}, "TTS": {"t1"}, "STT": {"s1"}}, dead={"a1"})
    watch = controller.watch(poll_s=0.05)
    stages = FakeStages()
    stages.llm_gate.close()  # Serve's router holds the call until a replica runs
    bounded = BoundedStages(stages, timeout_s=30, watch=watch)
    loop = asyncio.get_running_loop()
    asked_at = loop.time()
    with pytest.raises(StageFailure) as failure:
        await answer(bounded.generate(question()))
    waited_s = loop.time() - asked_at
    assert failure.value.code == "llm_unavailable", failure.value.code
    assert waited_s < 5, f"{waited_s:.2f} s: it waited for the stage timeout"
    assert stages.llm_streams[0].cancelled, "the queued call is withdrawn"
    assert watch.down_stages == ["llm"]
    with pytest.raises(StageFailure, match="no running replica"):
        await answer(bounded.generate(question()))
    assert stages.llm_streams[1].cancelled

    controller.running["LLM"] = {"a2"}  # Serve's replacement runs
    stages.llm_gate.open()
    await stopped_watching(watch)
    assert not watch.down("llm")
    assert await answer(bounded.generate(question())) == stages.answer


async def test_a_call_waiting_for_a_dead_replica_is_cancelled_as_unavailable() -> None:
    """A call with one result (a transcription) is given up on as a stream is."""
    controller = Controller({"LLM": {"a1"}, "TTS": {"t1"}, "STT": {"s1"}}, dead={"s1"})
    stages = FakeStages()
    stages.stt_gate.close()
    bounded = BoundedStages(stages, timeout_s=30, watch=controller.watch(poll_s=0.05))
    with pytest.raises(StageFailure) as failure:
        await bounded.transcribe(np.zeros(1600, np.float32))
    assert failure.value.code == "stt_unavailable"
    assert stages.stt_calls[0].cancelled


async def test_slow_calls_to_a_live_stage_wait_and_ask_the_controller_at_most_once_per_poll() -> None:
    """Five questions held past ``poll_s`` (a busy replica) share the controller's answers
    and are answered in the end; the stage is never down."""
    controller = Controller({"LLM": {"a1"}, "TTS": {"t1"}, "STT": {"s1"}})
    poll_s = 0.05
    watch = controller.watch(poll_s)
    stages = FakeStages()
    stages.llm_gate.close()
    bounded = BoundedStages(stages, timeout_s=30, watch=watch)
    loop = asyncio.get_running_loop()
    began = loop.time()
    answers = [asyncio.ensure_future(answer(bounded.generate(question()))) for _ in range(5)]
    for _ in range(3):  # the held calls go on asking while they wait
        await asyncio.wait_for(controller.asked_again(), 5)
    stages.llm_gate.open()
    assert await asyncio.gather(*answers) == [stages.answer] * 5
    elapsed_s = loop.time() - began
    assert controller.asked <= elapsed_s / poll_s + 2, (controller.asked, elapsed_s)
    assert watch.down_stages == []


async def test_prompt_calls_ask_the_controller_nothing() -> None:
    controller = Controller({"LLM": {"a1"}, "TTS": {"t1"}, "STT": {"s1"}})
    bounded = BoundedStages(FakeStages(), timeout_s=30, watch=controller.watch(poll_s=1.0))
    for _ in range(5):
        await answer(bounded.generate(question()))
        await bounded.transcribe(np.zeros(1600, np.float32))
    assert controller.asked == 0

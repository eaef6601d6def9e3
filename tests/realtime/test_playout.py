"""Nothing of an answer leaves its playout once it is stopped, even after the outbox has
forgotten the response (so no longer drops its output): the stale-audio guard's order."""

import asyncio

from rig import Rig

from deployments.realtime.items import AssistantMessage
from deployments.realtime.playback import Playback
from deployments.realtime.response.events import ResponseEvents
from deployments.realtime.response.playout import Playout
from deployments.realtime.response.run import ResponseRun
from deployments.realtime.timeline import Timeline
from deployments.realtime.transports.websocket import WebSocketAudio

FRAME = bytes(4800)  # 100 ms at 24 kHz


def playout_of(rig: Rig, playback: Playback) -> tuple[ResponseRun, Playout]:
    run = ResponseRun("resp_1", AssistantMessage("item_1", spoken_aloud=True), 0, asyncio.Future(), Timeline())
    run.outputs.append(run.answer)
    return run, Playout(run, ResponseEvents(rig.outbox, run), rig.outbox, playback, rig.supervisor.spawn)


async def test_a_stopped_playout_sends_nothing_after_its_response_is_forgotten() -> None:
    """A barge-in as the responder makes it: the listener stops (a paused frame is woken on
    its way), the response is cancelled, its playout stopped and, in the same turn of the
    event loop, forgotten by the outbox, before the playout's own task has run again. Neither
    the frame on its way nor one given later goes out: with the outbox's guard lifted, each
    would reach the client as audio of an answer it was told had ended."""
    async with Rig() as rig:
        playback = Playback(WebSocketAudio(rig._send), lambda: None, lead_ms=lambda: 1000)
        run, playout = playout_of(rig, playback)
        playout.play(FRAME)
        await rig.wait_type("response.output_audio.delta")
        playback.pause()  # the rules weigh a sound: the next frames wait for the listener
        playout.play(FRAME)
        playout.play(FRAME)
        async with asyncio.timeout(5):
            while playout.unsent_ms == 0:  # until a frame waits on the pause, on its way out
                await asyncio.sleep(0)

        playback.stopped()  # wakes the waiting frame
        rig.outbox.cancel(run.id)
        playout.stop()
        rig.outbox.forget(run.id)  # its task ended: the outbox drops nothing of it any more
        playout.play(FRAME)

        sending = playout._task
        assert sending is not None
        await asyncio.wait([sending], timeout=5)
        assert sending.done(), "the playout's task went on after stop"
        assert [event["type"] for event in await rig.drained()] == ["response.output_audio.delta"]


async def test_a_playout_stopped_before_its_first_frame_starts_no_task_for_a_later_one() -> None:
    """Stopped before anything was given, it has no task to cancel: a frame given later
    must not start one, which would send it after the outbox forgot the response."""
    async with Rig() as rig:
        run, playout = playout_of(rig, rig.playback)
        rig.outbox.cancel(run.id)
        playout.stop()
        rig.outbox.forget(run.id)
        playout.play(FRAME)
        assert playout._task is None
        assert await rig.drained() == []

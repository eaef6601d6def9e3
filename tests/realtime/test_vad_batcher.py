"""The ingress replica's VAD batcher: every session's ask of one tick in one run, each
answer back to its own session, and one session's trouble nobody else's."""

import asyncio

import numpy as np
import pytest
from fakes import real_denoiser

from deployments.voice_activity import VADBatcher, VADCall, VADResult, in_process
from handlers.listening import Hearing, Listener
from handlers.synthetic import EnergyVoiceDetector, question_tone
from handlers.vad import SpeechStarted, TurnDetection, VADState


class RecordingRun:
    """A batch runner that records each run's asks and can be made to fail or hold."""

    def __init__(self) -> None:
        self.runs: list[list[VADCall]] = []
        self.fail_next = False
        self.release = asyncio.Event()
        self.release.set()
        self.started = asyncio.Event()

    async def __call__(self, calls: list[VADCall]) -> list[VADResult]:
        self.runs.append(calls)
        self.started.set()
        await self.release.wait()
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("replica lost")
        return [(hearing, None, [SpeechStarted(len(audio))]) for hearing, audio in calls]


def ask(batcher: VADBatcher, size: int) -> "asyncio.Future[VADResult]":
    return batcher.listen(Hearing(VADState(TurnDetection())), np.zeros(size, dtype=np.float32))


async def test_asks_of_one_tick_share_one_run_and_get_their_own_answers() -> None:
    run = RecordingRun()
    batcher = VADBatcher(run, interval_s=0.05)
    answers = await asyncio.gather(*(ask(batcher, size) for size in range(100, 110)))
    assert len(run.runs) == 1 and len(run.runs[0]) == 10
    assert [events[0].start_sample for _, _, events in answers] == list(range(100, 110))
    batcher.close()


async def test_runs_are_paced_by_the_interval() -> None:
    run = RecordingRun()
    batcher = VADBatcher(run, interval_s=0.2)
    loop = asyncio.get_running_loop()
    await ask(batcher, 1)
    first_done = loop.time()
    await ask(batcher, 2)
    assert loop.time() - first_done >= 0.15  # the second run waited for its tick
    assert len(run.runs) == 2
    batcher.close()


async def test_a_failed_run_fails_only_its_asks_and_the_next_tick_works() -> None:
    run = RecordingRun()
    batcher = VADBatcher(run, interval_s=0.01)
    run.fail_next = True
    failed = await asyncio.gather(ask(batcher, 1), ask(batcher, 2), return_exceptions=True)
    assert all(isinstance(result, RuntimeError) for result in failed)
    _, _, events = await ask(batcher, 3)
    assert events == [SpeechStarted(3)]
    batcher.close()


async def test_a_session_that_gives_up_leaves_the_others_answered() -> None:
    """A session that ends (its task cancelled) while its ask waits: the run goes on for the
    rest, and the next run does not carry the abandoned ask."""
    run = RecordingRun()
    run.release.clear()
    batcher = VADBatcher(run, interval_s=0.01)
    keeper = asyncio.ensure_future(ask(batcher, 1))
    leaver = asyncio.ensure_future(ask(batcher, 2))
    await run.started.wait()
    leaver.cancel()
    run.release.set()
    _, _, events = await keeper
    assert events == [SpeechStarted(1)]
    abandoned = ask(batcher, 5)
    abandoned.cancel()
    await ask(batcher, 4)
    assert [len(audio) for _, audio in run.runs[-1]] == [4]
    batcher.close()


@pytest.mark.parametrize("sessions", [1, 8])
async def test_in_process_detector_hears_each_session_apart(sessions: int) -> None:
    """The real segmenter on the energy network through the batcher: only the sessions that
    spoke are heard, each at its own start."""
    batcher = VADBatcher(in_process(Listener(EnergyVoiceDetector(), real_denoiser())), interval_s=0.01)
    silence = np.zeros(8000, dtype=np.float32)
    audios = [
        np.concatenate([silence[: 1024 * (i + 1)], question_tone(i, 0.5)]) if i % 2 == 0 else silence
        for i in range(sessions)
    ]
    results = await asyncio.gather(*(batcher.listen(Hearing(VADState(TurnDetection())), audio) for audio in audios))
    for i, (hearing, heard, events) in enumerate(results):
        assert heard is None  # nobody asked for noise reduction
        state = hearing.vad
        assert state is not None
        if i % 2 == 0:
            assert events == [SpeechStarted(1024 * (i + 1))] and state.in_speech
        else:
            assert events == [] and not state.in_speech
    batcher.close()

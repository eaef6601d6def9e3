"""Voice activity detection (and noise reduction) for every session of an ingress replica,
one run per tick.

Each session's :class:`~deployments.realtime.audio_input.AudioInput` asks for one hearing
at a time (~0.1 s of audio: denoised if the session asked for ``noise_reduction``, then the
VAD; ``handlers.listening``). Answering each ask on its own costs more than the model: a
Serve call per session per frame (router, actor submission, pickling) or a network call per
session. So :class:`VADBatcher` collects every ask that arrives within ``interval_s`` and
answers them all with one run: silero's network over a batch of sessions, in this process
(``vad.placement: ingress``) or in one Serve call to the VAD deployment (``deployment``,
for clusters that keep models off the ingress's nodes).

The batch loop is shared by every session, so it runs detached (``cancel.spawn_detached``):
were it a child of the session whose ask started it, Serve's recursive cancel of that
session's request would cancel everyone's detections. (Serve's own ``@serve.batch`` starts
its loop in the first caller's context, which is why it is not used here.)
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

import numpy as np
from ray.serve.handle import DeploymentHandle

from cancel import spawn_detached
from handlers.denoise import Denoiser, NoiseReductionConfig
from handlers.listening import Heard, Hearing, Listener
from handlers.synthetic import EnergyVoiceDetector, SyntheticConfig
from handlers.vad import VoiceActivityDetector

logger = logging.getLogger(__name__)

VADCall = tuple[Hearing, np.ndarray]
VADResult = Heard
RunBatch = Callable[[list[VADCall]], Awaitable[list[VADResult]]]


def detector_for(synthetic: SyntheticConfig | None) -> VoiceActivityDetector:
    """silero, or in serving-layer mode (unless it asks for silero) the energy detector on
    silero's segmenter."""
    return EnergyVoiceDetector() if synthetic is not None and synthetic.vad == "energy" else VoiceActivityDetector()


def listener_for(synthetic: SyntheticConfig | None, noise_reduction: NoiseReductionConfig) -> Listener:
    """The detector of :func:`detector_for` behind the real denoiser (in serving-layer mode
    too: what noise reduction costs is part of what a load test measures)."""
    return Listener(detector_for(synthetic), Denoiser(noise_reduction))


def in_process(listener: Listener) -> RunBatch:
    """Runs a batch on ``listener`` in a worker thread (the networks release the GIL; the
    event loop goes on carrying sockets meanwhile)."""

    async def run(calls: list[VADCall]) -> list[VADResult]:
        return await asyncio.to_thread(listener.listen_batch, calls)

    return run


def on_deployment(vad: DeploymentHandle) -> RunBatch:
    """Runs a batch as one call to the VAD deployment (``VAD.detect_batch``)."""

    def run(calls: list[VADCall]) -> Awaitable[list[VADResult]]:
        return vad.detect_batch.remote(calls)  # type: ignore[no-any-return]

    return run


class VADBatcher:
    """Every ask of one tick in one run; a run starts at most every ``interval_s``."""

    def __init__(self, run: RunBatch, interval_s: float) -> None:
        self._run = run
        self._interval_s = interval_s
        self._asks: list[tuple[VADCall, asyncio.Future[VADResult]]] = []
        self._asked = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None

    def listen(self, hearing: Hearing, audio: np.ndarray) -> "asyncio.Future[VADResult]":
        """``hearing`` advanced over ``audio``, what it heard and the boundaries found, after the next run."""
        answer: asyncio.Future[VADResult] = asyncio.get_running_loop().create_future()
        self._asks.append(((hearing, audio), answer))
        self._asked.set()
        if self._loop is None or self._loop.done():
            self._loop = spawn_detached(self._batches())
        return answer

    async def _batches(self) -> None:
        clock = asyncio.get_running_loop()
        next_run = clock.time()
        while True:
            await self._asked.wait()
            await asyncio.sleep(next_run - clock.time())  # a tick's pacing, not a wait for an event
            next_run = clock.time() + self._interval_s
            self._asked.clear()
            asks, self._asks = [(call, answer) for call, answer in self._asks if not answer.done()], []
            if asks:
                await self._answer(asks)

    async def _answer(self, asks: list[tuple[VADCall, "asyncio.Future[VADResult]"]]) -> None:
        try:
            results = await self._run([call for call, _ in asks])
        except Exception as exc:  # every ask of the run fails; each session reports it and listens on
            logger.warning("a VAD run for %d sessions failed: %r", len(asks), exc)
            for _, answer in asks:
                if not answer.done():
                    answer.set_exception(exc)
            return
        for (_, answer), result in zip(asks, results, strict=True):
            if not answer.done():  # its session gave up waiting meanwhile
                answer.set_result(result)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.cancel()

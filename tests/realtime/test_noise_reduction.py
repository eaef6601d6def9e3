"""``audio.input.noise_reduction`` on fake stages with the real denoiser (DTLN): off by default,
each setting applied and shown, a bad one refused, and several sessions through one batch of
the ingress's listening runs, each denoised or not as it asked, none hearing another's state."""

import asyncio
from typing import Any

import numpy as np
from fakes import FakeStages, Harness, append_audio, real_denoiser

from deployments.voice_activity import VADBatcher, VADResult, in_process
from handlers.audio import float_to_pcm16
from handlers.denoise import DenoiserState
from handlers.listening import Hearing, Listener
from handlers.synthetic import EnergyVoiceDetector

MANUAL = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}


def noise_pcm(seconds: float, seed: int) -> bytes:
    """White noise at 24 kHz: what DTLN removes best, and no speech for the VAD to cut."""
    return float_to_pcm16(
        (np.random.default_rng(seed).standard_normal(int(24_000 * seconds)) * 0.05).astype(np.float32)
    )


def rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(audio))))


def with_noise_reduction(kind: str | None) -> dict[str, Any]:
    return {"type": "realtime", "audio": {"input": {"noise_reduction": None if kind is None else {"type": kind}}}}


async def committed_audio(h: Harness, heard: list[np.ndarray], pcm: bytes) -> np.ndarray:
    """What STT is given of ``pcm`` committed by hand and answered."""
    asked = len(heard)
    append_audio(h.socket, pcm)
    h.socket.client_sends(type="input_audio_buffer.commit")
    h.socket.client_sends(type="response.create")
    await h.stages.until(lambda: len(heard) > asked)
    return heard[-1]


def stt_hears(stages: FakeStages) -> list[np.ndarray]:
    heard: list[np.ndarray] = []

    def transcript_of(audio: np.ndarray) -> str:
        heard.append(audio)
        return "Question one."

    stages.transcript_of = transcript_of
    return heard


async def test_off_by_default_then_each_setting_is_applied_and_shown() -> None:
    stages = FakeStages()
    heard = stt_hears(stages)
    async with Harness(stages) as h:
        created = h.socket.of_type("session.created")[0]["session"]
        assert created["audio"]["input"].get("noise_reduction") is None
        h.socket.client_sends(type="session.update", session=MANUAL)
        await h.socket.wait_type("session.updated")
        raw = await committed_audio(h, heard, noise_pcm(1.0, seed=1))
        assert stages.noise_reduced == 0
        for count, kind in enumerate(("near_field", "far_field"), start=2):
            h.socket.client_sends(type="session.update", session=with_noise_reduction(kind))
            updated = (await h.socket.wait_type("session.updated", count=count))["session"]
            assert updated["audio"]["input"]["noise_reduction"] == {"type": kind}
            denoised = await committed_audio(h, heard, noise_pcm(1.0, seed=count))
            assert stages.noise_reduced > 0
            assert rms(denoised) < 0.6 * rms(raw)  # the noise is mostly gone (half the sound is the input)
        h.socket.client_sends(type="session.update", session=with_noise_reduction(None))
        updated = (await h.socket.wait_type("session.updated", count=4))["session"]
        assert updated["audio"]["input"].get("noise_reduction") is None
        reduced = stages.noise_reduced
        again = await committed_audio(h, heard, noise_pcm(1.0, seed=5))
        assert stages.noise_reduced == reduced and rms(again) > 0.8 * rms(raw)
        assert h.socket.of_type("error") == []


async def test_the_server_default_denoises_a_new_session_until_it_turns_it_off() -> None:
    """``ingress.noise_reduction``: what a phone call (which cannot ask) is heard through."""
    stages = FakeStages()
    heard = stt_hears(stages)
    async with Harness(stages, noise_reduction="far_field") as h:
        created = h.socket.of_type("session.created")[0]["session"]
        assert created["audio"]["input"]["noise_reduction"] == {"type": "far_field"}
        h.socket.client_sends(type="session.update", session=MANUAL)
        await h.socket.wait_type("session.updated")
        denoised = await committed_audio(h, heard, noise_pcm(1.0, seed=1))
        assert stages.noise_reduced > 0
        h.socket.client_sends(type="session.update", session=with_noise_reduction(None))
        await h.socket.wait_type("session.updated", count=2)
        raw = await committed_audio(h, heard, noise_pcm(1.0, seed=2))
        assert rms(denoised) < 0.6 * rms(raw)


async def test_a_noise_reduction_without_a_known_type_is_refused_and_changes_nothing() -> None:
    async with Harness() as h:
        h.socket.client_sends(type="session.update", session=with_noise_reduction("near_field"))
        await h.socket.wait_type("session.updated")
        h.socket.client_sends(
            type="session.update",
            session={"type": "realtime", "instructions": "Be brief.", "audio": {"input": {"noise_reduction": {}}}},
        )
        error = (await h.socket.wait_type("error"))["error"]
        assert (error["code"], error["param"]) == ("invalid_value", "session.audio.input.noise_reduction.type")
        assert h.session.settings.noise_reduction == "near_field" and h.session.settings.instructions is None
        h.socket.client_sends(type="session.update", session=MANUAL)  # the session goes on
        await h.socket.wait_type("session.updated", count=2)


async def test_sessions_on_one_batch_are_each_denoised_as_they_asked_and_alone() -> None:
    """Three sessions through the same listening runs: near_field, none, far_field. Each
    denoised session's audio is exactly what a denoiser of its own makes of it (no state
    crosses between the rows of a batch); the one that asked for nothing hears its audio."""
    batcher = VADBatcher(in_process(Listener(EnergyVoiceDetector(), real_denoiser())), interval_s=0.02)
    kinds = ("near_field", None, "far_field")
    stages = [FakeStages() for _ in kinds]
    sent_by: dict[int, list[np.ndarray]] = {id(one): [] for one in stages}
    heard_by: dict[int, list[np.ndarray]] = {id(one): [] for one in stages}
    listened = asyncio.Event()
    for one in stages:

        async def listen(hearing: Hearing, audio: np.ndarray, one: FakeStages = one) -> VADResult:
            one.noise_reduced += hearing.noise is not None
            answer = await batcher.listen(hearing, audio)
            sent_by[id(one)].append(audio)
            heard_by[id(one)].append(audio if answer[1] is None else answer[1])
            listened.set()
            return answer

        one.listen = listen  # type: ignore[method-assign]

    def all_heard() -> bool:
        return all(sum(map(len, heard)) >= 30_000 for heard in heard_by.values())

    async with Harness(stages[0], name="a") as a, Harness(stages[1], name="b") as b, Harness(stages[2], name="c") as c:
        for h, kind in zip((a, b, c), kinds, strict=True):
            h.socket.client_sends(type="session.update", session=with_noise_reduction(kind))
            await h.socket.wait_type("session.updated")
        for seed, h in enumerate((a, b, c)):
            append_audio(h.socket, noise_pcm(2.0, seed=seed), frame_ms=20)
        async with asyncio.timeout(20):
            while not all_heard():
                listened.clear()
                await listened.wait()
    batcher.close()
    for one, kind in zip(stages, kinds, strict=True):
        sent, heard = np.concatenate(sent_by[id(one)]), np.concatenate(heard_by[id(one)])
        if kind is None:
            assert one.noise_reduced == 0 and np.array_equal(heard, sent)
        else:
            alone = real_denoiser().denoise(DenoiserState(kind), sent)  # type: ignore[arg-type]
            np.testing.assert_allclose(heard, alone, atol=1e-6)
            assert rms(heard[8000:]) < 0.6 * rms(sent[8000:])

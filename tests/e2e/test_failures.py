"""A stage replica dying is a failure the client hears about, in our words, and the session
goes on once Serve has replaced the replica (synthetic engines, so that a kill lands
mid-answer). Scope hosts dying: ``test_isolation.py``."""

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import numpy as np
import pytest
import ray
from ray import serve
from ray.util.state import list_actors
from realtime_client import Client, open_client

from deployments.app import build_app
from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, resample
from handlers.synthetic import question_tone

APP = "voice-failures"
ANSWER_WORDS = 40


@pytest.fixture(scope="module")
def slow_synthetic_url(serve_port: int) -> Iterator[str]:
    """Synthetic engines whose LLM takes seconds per answer."""
    tiny = {"num_cpus": 0.01}
    config = {
        "synthetic": {"answer_words": ANSWER_WORDS, "tokens_per_s": 8},
        "ingress": {"max_sessions": 4, "deployment": {**tiny, "max_ongoing_requests": 8}, "stage_timeout_s": 10},
        **{stage: {"deployment": {**tiny}} for stage in ("vad", "stt", "llm", "tts")},
    }
    serve.run(build_app(config), name=APP, route_prefix="/failures")
    yield f"ws://127.0.0.1:{serve_port}/failures/v1"
    serve.delete(APP)


def kill_replica(stage: str) -> None:
    (replica,) = list_actors(
        address=ray.get_runtime_context().gcs_address,
        filters=[("class_name", "=", f"ServeReplica:{APP}:{stage}"), ("state", "=", "ALIVE")],
    )
    ray.kill(ray.get_actor(replica.name, namespace="serve"), no_restart=True)


async def ask(client: Client, text: str) -> None:
    await client.connection.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    await client.connection.response.create()


async def next_answer_completes(client: Client, url: str, question: int, asked: tuple[int, ...] = ()) -> None:
    """The session goes on: once ``/readyz`` says Serve has replaced the replica, the next
    answer completes (a request sent before Serve noticed the death may still fail, visibly)."""
    await asyncio.to_thread(wait_until_ready, url.replace("ws://", "http://").removesuffix("/v1") + "/readyz")
    codes = []
    for _ in range(3):
        await ask(client, f"Question {question}.")
        again = await client.until(lambda e: e.type == "response.done", timeout_s=120)
        while again.response.status == "completed":  # late answers may only be to what was asked
            transcript = again.response.output[0].content[0].transcript
            if transcript.startswith(f"Answer {question}:"):
                return
            assert any(transcript.startswith(f"Answer {n}:") for n in asked), transcript
            again = await client.until(lambda e: e.type == "response.done", timeout_s=120)
        codes.append(again.response.status_details.error.code)
        assert codes[-1].endswith(("_failed", "_timeout"))
    raise AssertionError(f"no answer completed after the replica was replaced: {codes}")


def wait_until_ready(url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            assert time.monotonic() < deadline, "Serve did not replace the replica"
        time.sleep(0.5)  # polling a replica that is starting: there is no event to wait on


@pytest.mark.parametrize("stage", ["LLM", "TTS"])
async def test_a_replica_dying_mid_answer_fails_the_response_visibly(slow_synthetic_url: str, stage: str) -> None:
    """The answer is failed visibly, or (TTS only) whole: never cut short and completed."""
    async with open_client(slow_synthetic_url) as client:
        await ask(client, "Question 5.")
        first = await client.until(lambda e: e.type == "response.output_audio.delta")
        kill_replica(stage)
        done = await client.until(lambda e: e.type == "response.done")
        errors = list(client.of_type("error"))
        await next_answer_completes(client, slow_synthetic_url, 6)

    if stage == "TTS" and done.response.status == "completed":
        # The TTS stream of the sentence being spoken had ended before the kill, and Serve
        # replaced the replica before the next sentence's call timed out: nothing was lost.
        words = done.response.output[0].content[0].transcript.split()
        assert words[:2] == ["Answer", "5:"] and len(words) == 2 + ANSWER_WORDS
        assert errors == []
        return
    # Failed if the kill cut its stream; timed out if the next call waited for a replica.
    code = done.response.status_details.error.code
    assert code in (f"{stage.lower()}_failed", f"{stage.lower()}_timeout")
    assert done.response.id == first.response_id
    assert done.response.status == "failed"
    assert [(e.error.type, e.error.code) for e in errors] == [("server_error", code)]
    assert "Actor" not in errors[0].error.message and "pid" not in errors[0].error.message


@pytest.mark.parametrize("stage", ["STT", "VAD"])
async def test_a_dead_listening_stage_never_answers_a_question_nobody_asked(
    slow_synthetic_url: str, stage: str
) -> None:
    """With the STT or VAD replica gone, a spoken question is either heard and answered (the
    replacement came up in time) or reported as not heard; never answered as something else."""
    tone = np.concatenate([question_tone(11, 1.0), np.zeros(SPEECH_RATE, np.float32)])
    pcm = float_to_pcm16(resample(tone, SPEECH_RATE, REALTIME_RATE))
    async with open_client(slow_synthetic_url) as client:
        kill_replica(stage)
        await client.send_audio(pcm)
        event = await client.until(
            lambda e: (
                e.type in ("response.done", "error")
                and not (e.type == "response.done" and e.response.status == "cancelled")
            ),
            timeout_s=60,
        )
        if event.type == "response.done" and event.response.status == "completed":
            assert event.response.output[0].content[0].transcript.startswith("Answer 11:")
        elif event.type == "response.done":
            assert event.response.status_details.error.code == "transcription_failed"
            assert client.of_type("conversation.item.input_audio_transcription.failed")
        else:
            assert event.error.code in ("vad_failed", "stt_failed", "stt_timeout", "transcription_failed")
        await next_answer_completes(client, slow_synthetic_url, 12, asked=(11,))

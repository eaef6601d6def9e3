"""A stage replica dying is a failure the client hears about, in our words, and the session
goes on once Serve has replaced the replica (synthetic engines, so that a kill lands
mid-answer). With two TTS replicas, one dying mid-answer costs no answer: its pieces are
spoken by the other at once. Scope hosts dying: ``test_isolation.py``."""

import asyncio
import base64
import contextlib
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import ray
from ray import serve
from ray.util.state import list_actors
from realtime_client import Client, open_client

from deployments.app import build_app
from deployments.realtime.response.failover import REPLICA_FAILOVER_S
from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, resample
from handlers.synthetic import question_tone

pytestmark = pytest.mark.serve
"""Ray and Serve with the synthetic engines, no model: part of ``make test-serve``."""

APP = "voice-failures"
ANSWER_WORDS = 40


@pytest.fixture(scope="module")
def slow_synthetic_url(serve_port: int) -> Iterator[str]:
    """Synthetic engines whose LLM takes seconds per answer."""
    tiny = {"num_cpus": 0.01}
    config = {
        "synthetic": {"answer_words": ANSWER_WORDS, "tokens_per_s": 8},
        "ingress": {"max_sessions": 4, "deployment": {**tiny, "max_ongoing_requests": 8}, "stage_timeout_s": 10},
        "vad": {"placement": "deployment", "deployment": {**tiny}},  # a VAD replica of its own, to kill
        **{stage: {"deployment": {**tiny}} for stage in ("stt", "llm", "tts")},
    }
    serve.run(build_app(config), name=APP, route_prefix="/failures")
    yield f"ws://127.0.0.1:{serve_port}/failures/v1"
    serve.delete(APP)


def replicas(stage: str, app: str = APP) -> list[ray.actor.ActorHandle]:
    alive = list_actors(
        address=ray.get_runtime_context().gcs_address,
        filters=[("class_name", "=", f"ServeReplica:{app}:{stage}"), ("state", "=", "ALIVE")],
    )
    return [ray.get_actor(replica.name, namespace="serve") for replica in alive]


def kill_replica(stage: str) -> None:
    (replica,) = replicas(stage)
    ray.kill(replica, no_restart=True)


async def ask(client: Client, text: str) -> None:
    await client.connection.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    await client.connection.response.create()


async def next_answer_completes(client: Client, url: str, question: int, asked: tuple[int, ...] = ()) -> None:
    """The session goes on: once ``/readyz`` says Serve has replaced the replica, the next
    answer completes (a request sent before Serve noticed the death, or before the ingress
    saw the replacement run, may still fail, visibly)."""
    await asyncio.to_thread(wait_until_ready, url.replace("ws://", "http://").removesuffix("/v1") + "/readyz")
    codes = []
    for _ in range(3):
        await ask(client, f"Question {question}.")
        again = await client.until(lambda e: e.type == "response.done" or busy(e), timeout_s=120)
        if busy(again):  # a late answer to an earlier question was running: asked again once it is done
            codes.append(again.error.code)
            again = await client.until(lambda e: e.type == "response.done", timeout_s=120)
            if again.response.status == "completed" and answers(again, (question,)):
                return  # its prompt was read after this question was added: it answers it
            assert again.response.status != "completed" or answers(again, asked), again.response.output
            continue
        while again.response.status == "completed":  # late answers may only be to what was asked
            if answers(again, (question,)):
                return
            assert answers(again, asked), again.response.output
            again = await client.until(lambda e: e.type == "response.done", timeout_s=120)
        details = again.response.status_details
        if again.response.status == "cancelled":  # speech the new replica heard late is a turn: it interrupts
            assert details.reason == "turn_detected", details
            codes.append(details.reason)
            continue
        codes.append(details.error.code)
        assert codes[-1].endswith(("_failed", "_timeout", "_unavailable"))
    raise AssertionError(f"no answer completed after the replica was replaced: {codes}")


def busy(event: Any) -> bool:
    """``response.create`` refused: a response was in progress."""
    return event.type == "error" and event.error.code == "conversation_already_has_active_response"


def answers(done: Any, questions: tuple[int, ...]) -> bool:
    transcript = done.response.output[0].content[0].transcript
    return any(transcript.startswith(f"Answer {n}:") for n in questions)


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


FAILOVER_APP = "voice-failover"
FAILOVER_SESSIONS = 3
FAILOVER_WORDS = 48
SPEECH_S_PER_WORD = 0.1
SILENCE_BOUND_S = REPLICA_FAILOVER_S + 1.0
"""The failover bound, plus a second for Ray to report the death (measured: ~10 ms; Ray waits
up to 1 s for a dead actor's death notice) and for a loaded 2-core machine."""


@pytest.fixture
def two_tts_url(serve_port: int) -> Iterator[str]:
    """Synthetic engines, two TTS replicas that each speak one sentence at a time: answers
    wait on the TTS, so a replica has pieces in flight whenever answers are being spoken."""
    tiny = {"num_cpus": 0.01}
    config = {
        "synthetic": {
            "answer_words": FAILOVER_WORDS,
            "tokens_per_s": 40,
            "speech_s_per_word": SPEECH_S_PER_WORD,
            "tts_hold_s_per_sentence": 0.2,
        },
        "ingress": {"max_sessions": 4, "deployment": {**tiny, "max_ongoing_requests": 8}, "stage_timeout_s": 10},
        **{stage: {"deployment": {**tiny}} for stage in ("vad", "stt", "llm")},
        "tts": {"deployment": {**tiny, "num_replicas": 2}},
    }
    serve.run(build_app(config), name=FAILOVER_APP, route_prefix="/failover")
    yield f"ws://127.0.0.1:{serve_port}/failover/v1"
    serve.delete(FAILOVER_APP)


def kill_a_busy_replica(stage: str, app: str, timeout_s: float = 10) -> float:
    """Kill a replica of ``stage`` while it has requests in flight (a piece being spoken);
    return when."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for replica in replicas(stage, app):
            if ray.get(replica.get_num_ongoing_requests.remote(), timeout=5) > 0:
                ray.kill(replica, no_restart=True)
                return time.monotonic()
    raise AssertionError(f"no {stage} replica had a request in flight")


def tone_bytes(piece: str) -> int:
    """What the synthetic TTS says for ``piece``: a tone per sentence, as long as its words."""
    sentences = re.findall(r"[^.!?]+[.!?]*", piece)
    return sum(2 * int(len(s.split()) * SPEECH_S_PER_WORD * REALTIME_RATE) for s in sentences if s.strip())


async def spoken_answer(client: Client, question: int, speaking: asyncio.Event) -> tuple[Any, list[float]]:
    """Ask ``question``; its ``response.done`` and when the client received each of its audio
    deltas (``speaking`` is set at the first)."""
    await ask(client, f"Question {question}.")
    arrivals: list[float] = []

    def heard(event: Any) -> bool:
        if event.type == "response.output_audio.delta":
            arrivals.append(time.monotonic())
            speaking.set()
        return bool(event.type == "response.done")

    return await client.until(heard, timeout_s=60), arrivals


def longest_silence(arrivals: list[float], since: float) -> tuple[float, float]:
    """The longest wait between two audio deltas that ended after ``since``, and when it
    began relative to ``since``."""
    waits = [(b - a, a - since) for a, b in zip(arrivals, arrivals[1:], strict=False) if b > since]
    return max(waits, default=(0.0, 0.0))


def assert_spoken_whole(client: Client, done: Any, question: int) -> None:
    """Completed with every word, and every piece's audio exactly once."""
    response = done.response
    assert response.status == "completed", response.status_details
    transcript = response.output[0].content[0].transcript
    assert transcript.startswith(f"Answer {question}:") and len(transcript.split()) == 2 + FAILOVER_WORDS
    pieces = [e.delta for e in client.of_type("response.output_audio_transcript.delta", response.id)]
    assert "".join(pieces) == transcript
    audio = b"".join(base64.b64decode(e.delta) for e in client.of_type("response.output_audio.delta", response.id))
    assert len(audio) == sum(tone_bytes(piece) for piece in pieces), "a sentence was said twice or never"
    assert client.of_type("error") == []


async def test_a_tts_replica_dying_mid_answer_costs_no_answer_and_no_silence(two_tts_url: str) -> None:
    """One of two TTS replicas is killed while it speaks: the pieces it had are spoken by the
    other at once, so every session's answer completes whole, with no wait between two audio
    deltas near the failover bound (it takes ~0.6 s here, as between any two pieces); the
    sessions go on."""
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(open_client(two_tts_url)) for _ in range(FAILOVER_SESSIONS)]
        speaking = [asyncio.Event() for _ in clients]
        answers = [
            asyncio.ensure_future(spoken_answer(client, 20 + i, speaking[i])) for i, client in enumerate(clients)
        ]
        async with asyncio.timeout(30):
            await asyncio.gather(*(event.wait() for event in speaking))
        killed_at = await asyncio.to_thread(kill_a_busy_replica, "TTS", FAILOVER_APP)
        results = await asyncio.gather(*answers)
        silences = [longest_silence(arrivals, killed_at) for _, arrivals in results]
        print(f"longest wait between audio deltas since the kill, and when it began: {silences}")
        for i, (client, (done, _)) in enumerate(zip(clients, results, strict=True)):
            assert_spoken_whole(client, done, 20 + i)
            silence_s, began_s = silences[i]
            assert silence_s < SILENCE_BOUND_S, f"session {i}: no audio for {silence_s:.2f} s from {began_s:+.2f} s"
        # The survivor speaks for all while Serve replaces the dead one: the sessions go on.
        again = await asyncio.gather(
            *(spoken_answer(client, 30 + i, asyncio.Event()) for i, client in enumerate(clients))
        )
        for i, (client, (done, _)) in enumerate(zip(clients, again, strict=True)):
            assert_spoken_whole(client, done, 30 + i)


@pytest.mark.parametrize("stage", ["LLM", "TTS"])
async def test_a_replica_dying_mid_answer_fails_the_response_visibly(slow_synthetic_url: str, stage: str) -> None:
    """The answer is failed visibly, or (TTS only) whole: never cut short and completed. The
    only replica of the stage dies: a TTS piece it was speaking finds no replica to take over
    within the failover bound (Serve is still starting the replacement)."""
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
    # Failed if the kill cut its stream; unavailable if a call (for TTS: the cut piece's
    # retry, or the next piece) waited for a replica while the watch found none.
    code = done.response.status_details.error.code
    assert code in (f"{stage.lower()}_failed", f"{stage.lower()}_unavailable")
    assert done.response.id == first.response_id
    assert done.response.status == "failed"
    assert [(e.error.type, e.error.code) for e in errors] == [("server_error", code)]
    assert "Actor" not in errors[0].error.message and "pid" not in errors[0].error.message


async def test_a_question_to_a_model_with_no_running_replica_fails_at_once_and_says_so(
    slow_synthetic_url: str,
) -> None:
    """The only LLM replica dies mid-answer: that answer fails, and a question asked while
    Serve replaces the replica fails at once, ``llm_unavailable`` (not ``llm_timeout`` after
    the stage timeout); once the replacement runs, the next is answered."""
    async with open_client(slow_synthetic_url) as client:
        await ask(client, "Question 7.")
        await client.until(lambda e: e.type == "response.output_audio.delta")
        kill_replica("LLM")
        cut = await client.until(lambda e: e.type == "response.done")
        assert cut.response.status == "failed" and cut.response.status_details.error.code == "llm_failed"
        await asyncio.to_thread(wait_until_unavailable, slow_synthetic_url, "llm")
        asked_at = time.monotonic()
        await ask(client, "Question 8.")
        refused = await client.until(lambda e: e.type == "response.done" and e.response.id != cut.response.id)
        waited_s = time.monotonic() - asked_at
        assert refused.response.status == "failed"
        assert refused.response.status_details.error.code == "llm_unavailable", refused.response.status_details
        assert waited_s < 10, "it did not wait for the stage timeout (10 s)"
        (error,) = [e for e in client.of_type("error") if e.error.code == "llm_unavailable"]
        assert "no running replica" in error.error.message and "/readyz" in error.error.message
        await next_answer_completes(client, slow_synthetic_url, 9)


BETWEEN_TURNS_SESSIONS = 3
UNAVAILABLE_WITHIN_S = 2.0


async def test_a_model_killed_between_turns_fails_the_next_questions_at_once_on_every_session(
    slow_synthetic_url: str,
) -> None:
    """The only LLM replica dies while no answer is being made: no call fails, the controller
    learns of it only at its next health check, and Serve's router holds the next questions
    for the replacement (before: ``llm_timeout`` after the stage timeout). Each session's next
    question, asked together, fails ``llm_unavailable`` within 2 s; once ``/readyz`` is 200,
    each session is answered again."""
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(open_client(slow_synthetic_url)) for _ in range(BETWEEN_TURNS_SESSIONS)
        ]
        firsts = await asyncio.gather(*(answered(client, 40 + i) for i, client in enumerate(clients)))
        assert all(done.response.status == "completed" for done in firsts), [d.response.status for d in firsts]
        await asyncio.to_thread(kill_replica_and_wait, "LLM")

        waits = await asyncio.gather(*(refused_in_s(client, 50 + i) for i, client in enumerate(clients)))
        print(f"question to llm_unavailable, per session: {[f'{w:.2f} s' for w in waits]}")
        assert max(waits) < UNAVAILABLE_WITHIN_S, waits
        for client in clients:
            (error,) = [e for e in client.of_type("error") if e.error.code == "llm_unavailable"]
            assert "no running replica" in error.error.message
        await asyncio.gather(
            *(next_answer_completes(client, slow_synthetic_url, 60 + i) for i, client in enumerate(clients))
        )


async def answered(client: Client, question: int) -> Any:
    await ask(client, f"Question {question}.")
    return await client.until(lambda e: e.type == "response.done", timeout_s=60)


async def refused_in_s(client: Client, question: int) -> float:
    """Ask ``question``; seconds until its ``response.done``, which must be a failure,
    ``llm_unavailable``."""
    asked_at = time.monotonic()
    await ask(client, f"Question {question}.")
    done = await client.until(lambda e: e.type == "response.done", timeout_s=60)
    assert done.response.status == "failed", done.response.status
    assert done.response.status_details.error.code == "llm_unavailable", done.response.status_details
    return client.received_at[-1] - asked_at


def kill_replica_and_wait(stage: str, timeout_s: float = 10) -> None:
    """Kill the only replica of ``stage`` and return once Ray holds it dead (``ray.kill``
    only asks): a call sent after this cannot reach it."""
    kill_replica(stage)
    deadline = time.monotonic() + timeout_s
    while replicas(stage):
        assert time.monotonic() < deadline, f"the {stage} replica did not die"
        time.sleep(0.05)  # polling Ray's view of the actor: there is no event to wait on


def wait_until_unavailable(url: str, stage: str, timeout_s: float = 30) -> None:
    """Until the ingress's ``/healthz`` says ``stage`` has no running replica."""
    healthz = url.replace("ws://", "http://").removesuffix("/v1") + "/healthz"
    deadline = time.monotonic() + timeout_s
    while True:
        with urllib.request.urlopen(healthz, timeout=10) as reply:
            if stage in json.load(reply)["unavailable"]:
                return
        assert time.monotonic() < deadline, f"{stage} was never reported unavailable"
        time.sleep(0.1)  # polling the replica's view: there is no event to wait on


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

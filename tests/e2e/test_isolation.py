"""A cancel stops exactly its own response: other sessions' answers, streaming through the
same LLM and TTS replicas and watching the same scope host, come out whole (real models)."""

import asyncio
import os
import signal

import pytest
import ray
from ray.util.state import list_actors
from realtime_client import FINISHED, Client, audio_of, open_client, sessions_released

from handlers.audio import REALTIME_RATE

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

STORIES = [
    "Tell me a long story about a brave knight and a dragon.",
    "Tell me a long story about a pirate who finds a treasure.",
    "Tell me a long story about a robot who learns to paint.",
]
WHOLE = 0.8
"""Share of the words of the same prompt answered alone that makes an answer whole."""
SPOKEN_S_PER_WORD = 0.15
"""Less audio than this per word of the transcript means words were never voiced."""


async def ask(client: Client, text: str) -> None:
    await client.connection.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    await client.connection.response.create()


async def speaking(client: Client) -> str:
    """Wait for the response's first audio; return its id."""
    delta = await client.until(lambda e: e.type == "response.output_audio.delta")
    return delta.response_id


async def answer(client: Client, response_id: str | None = None) -> tuple[str, int, float]:
    """Wait for a response's end: its status, the words of its transcript, its audio seconds."""
    done = await client.until(lambda e: e.type == "response.done" and response_id in (None, e.response.id))
    transcripts = client.of_type("response.output_audio_transcript.done", done.response.id)
    words = len(transcripts[0].transcript.split()) if transcripts else 0
    seconds = len(audio_of(client, done.response.id)) / (2 * REALTIME_RATE)
    return done.response.status, words, seconds


@pytest.fixture(autouse=True)
async def released(realtime_url: str) -> None:
    """Each test starts with the cap free: the sessions of the test before are released."""
    await sessions_released(realtime_url)


@pytest.fixture(scope="module")
async def solo_words(realtime_url: str) -> dict[str, int]:
    """Words of each story answered with nothing else running."""
    words = {}
    for story in STORIES:
        async with open_client(realtime_url) as client:
            await ask(client, story)
            status, words[story], _ = await answer(client)
            assert status in FINISHED
    return words


def assert_whole(result: tuple[str, int, float], solo: int) -> None:
    status, words, seconds = result
    assert status in FINISHED
    assert words >= WHOLE * solo, f"{words} words where the answer alone has {solo}"
    assert seconds >= SPOKEN_S_PER_WORD * words, f"{words} words in {seconds:.1f} s of audio"


@pytest.mark.parametrize("how", ["response.cancel", "barge-in", "response.cancel", "barge-in"])
async def test_a_cancel_cuts_no_other_sessions_answer(
    realtime_url: str, solo_words: dict[str, int], pcm24k, how: str
) -> None:
    async with (
        open_client(realtime_url) as victim,
        open_client(realtime_url) as a,
        open_client(realtime_url) as b,
        open_client(realtime_url) as c,
    ):
        # The victim's requests start first: they are the first to watch the scope host in
        # the LLM and TTS replicas.
        await ask(victim, STORIES[0])
        cancelled_id = await speaking(victim)
        bystanders = {a: STORIES[0], b: STORIES[1], c: STORIES[2]}
        for client, story in bystanders.items():
            await ask(client, story)
        ids = await asyncio.gather(*(speaking(client) for client in bystanders))

        if how == "response.cancel":
            await victim.connection.response.cancel()
        else:
            await victim.send_audio(pcm24k("What is the capital of France?"), realtime=True)
        status, _, _ = await answer(victim, cancelled_id)
        assert status == "cancelled"

        results = await asyncio.gather(*(answer(client, id_) for client, id_ in zip(bystanders, ids, strict=True)))
        if how == "barge-in":  # and the victim's new question is answered
            assert (await answer(victim))[0] in FINISHED
    for story, result in zip(bystanders.values(), results, strict=True):
        assert_whole(result, solo_words[story])


def scope_host_pids() -> list[int]:
    actors = list_actors(
        address=ray.get_runtime_context().gcs_address,
        filters=[("class_name", "=", "ScopeHost"), ("state", "=", "ALIVE")],
    )
    return [actor.pid for actor in actors]


async def test_killed_scope_hosts_cut_no_answer_and_the_next_turn_works(
    realtime_url: str, solo_words: dict[str, int]
) -> None:
    async with open_client(realtime_url) as a, open_client(realtime_url) as b:
        await ask(a, STORIES[1])
        await ask(b, STORIES[2])
        ids = await asyncio.gather(speaking(a), speaking(b))
        pids = scope_host_pids()
        assert pids
        for pid in pids:  # a crash: Ray restarts the hosts, which start empty
            os.kill(pid, signal.SIGKILL)
        results = await asyncio.gather(answer(a, ids[0]), answer(b, ids[1]))
        for result, story in zip(results, STORIES[1:], strict=True):
            assert_whole(result, solo_words[story])

        # The next turn works, and its cancel still stops exactly its own answer.
        await ask(a, STORIES[1])
        await ask(b, STORIES[2])
        cancelled_id, kept_id = await asyncio.gather(speaking(a), speaking(b))
        await a.connection.response.cancel()
        assert (await answer(a, cancelled_id))[0] == "cancelled"
        assert_whole(await answer(b, kept_id), solo_words[STORIES[2]])

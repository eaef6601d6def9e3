"""The voice defaults served by the real models: several sessions through the same replicas,
one of them interrupted, each answered short, whole and in English, with the server's
instructions shown. The 135M model's words are never asserted, only the answers' shape."""

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray import serve
from realtime_client import APP_NAME, Client, audio_of, open_client, sessions_released
from suite_app import suite_config

from deployments.app import build_app
from deployments.config import IngressConfig
from handlers.audio import REALTIME_RATE
from handlers.instructions import VOICE_INSTRUCTIONS
from loadtest.benchmarks.answer_checks import EnglishCheck

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

QUESTIONS = ["What is the capital of France?", "How many legs does a dog have?", "What do bees make?"]
LONGEST_ANSWER_S = 15.0
"""The benchmark's bound on a spoken answer (docs/bench/quality.md)."""
SENTENCE_END = re.compile(r"[.!?…][\"')\]]*$")


async def ask(client: Client, text: str) -> str:
    """Ask ``text``; the id of its response once it speaks."""
    await client.connection.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )
    await client.connection.response.create()
    return str((await client.until(lambda e: e.type == "response.output_audio.delta")).response_id)


async def answered(client: Client, response_id: str) -> tuple[str, str, float]:
    """The response's status, its transcript and its seconds of audio, once it is done."""
    done = await client.until(lambda e: e.type == "response.done" and e.response.id == response_id)
    transcripts = client.of_type("response.output_audio_transcript.done", response_id)
    seconds = len(audio_of(client, response_id)) / (2 * REALTIME_RATE)
    return done.response.status, transcripts[0].transcript if transcripts else "", seconds


@pytest.fixture(scope="module")
def defaults_url(realtime_url: str, recordings_dir: Path) -> Iterator[str]:
    """The suite's app with the ingress's voice defaults back (only the ingress is redeployed:
    the models' replicas stay), and the suite's settings again afterwards."""
    voice = IngressConfig()
    serve.run(
        build_app(suite_config(recordings_dir, instructions=voice.instructions, answer_tokens=voice.answer_tokens)),
        name=APP_NAME,
        route_prefix="/",
    )
    yield realtime_url
    serve.run(build_app(suite_config(recordings_dir)), name=APP_NAME, route_prefix="/")


async def test_sessions_on_the_defaults_get_short_whole_english_answers_beside_an_interrupted_one(
    defaults_url: str,
) -> None:
    await sessions_released(defaults_url)
    realtime_url = defaults_url
    in_english = EnglishCheck()
    async with (
        open_client(realtime_url) as stopped,
        open_client(realtime_url) as a,
        open_client(realtime_url) as b,
    ):
        created = stopped.of_type("session.created")[0]
        assert created.session.instructions == VOICE_INSTRUCTIONS
        cancelled_id = await ask(stopped, QUESTIONS[2])
        ids = await asyncio.gather(ask(a, QUESTIONS[0]), ask(b, QUESTIONS[1]))
        await stopped.connection.response.cancel()
        assert (await answered(stopped, cancelled_id))[0] == "cancelled"
        again = await ask(stopped, QUESTIONS[2])
        results = await asyncio.gather(answered(a, ids[0]), answered(b, ids[1]), answered(stopped, again))
    for status, transcript, seconds in results:
        assert status == "completed", (status, transcript)
        assert 0 < seconds <= LONGEST_ANSWER_S, (seconds, transcript)
        assert SENTENCE_END.search(transcript.strip()), f"ends mid-sentence: {transcript!r}"
        assert in_english(transcript) is not False, f"not English: {transcript!r}"

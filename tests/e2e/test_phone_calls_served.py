"""Phone calls a business can run, on a real local Ray cluster with synthetic engines (tones),
placed as Twilio places them (the webhook's TwiML followed verb by verb): greeted first;
carried through a redeploy, each call's stream closed between turns by its draining replica
and brought back by the TwiML's ``<Redirect>`` on a new stream that resumes its session with
every item; and a silent caller asked once, then hung up, the webhook then ending the call."""

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import ray
from ray import serve
from realtime_client import Client, open_client
from test_session_resume import app_config as resume_app_config

from deployments.app import build_app
from deployments.keyed_digests import KeyedDigests
from loadtest.benchmarks.telephony import SILENCE, mulaw_question
from loadtest.client.twilio_caller import TwilioCall, TwilioCaller, call_sid

pytestmark = pytest.mark.serve
"""Ray and Serve with the synthetic engines, no model: part of ``make test-serve``."""

APP = "voice-calls"
GREETING = "Hello there."
GREETED_WITHIN_S = 1.5
"""A new session's greeting is ready audio: it comes within milliseconds of ``start``."""


def app_config(instructions: str, **twilio: Any) -> dict[str, Any]:
    """The resume tests' app, its calls greeted and configured with ``twilio``, its answers
    2.5 s long."""
    config = resume_app_config(instructions)
    config["ingress"]["twilio"] = {"greeting": GREETING, **twilio}
    config["synthetic"] |= {"answer_words": 24, "speech_s_per_word": 0.1}  # answers long enough to speak over
    return config


@pytest.fixture(scope="module")
def calls_url(serve_port: int) -> Iterator[str]:
    serve.run(build_app(app_config("Version one.")), name=APP, route_prefix="/calls")
    yield f"http://127.0.0.1:{serve_port}/calls/v1"
    serve.delete(APP)


async def ask(stream: TwilioCaller, question: int) -> None:
    """Ask ``question``; its answer plays to its end."""
    answered = len(stream.answered())
    await stream.say(mulaw_question(question) + SILENCE)
    await stream.until_answered(answered + 1, timeout_s=60)


async def resume_token_of(name: str) -> str:
    """White box: the token the call's standing grant in the store resumes its session with
    (sealed there)."""
    actor = ray.get_actor(f"s2s-sessions-{APP}", namespace="s2s")
    digests = KeyedDigests(await actor.session_secret.remote())
    grant = await actor.redeem_client_secret.remote(await digests.of("phone_call", call_sid(name)), call_sid(name))
    assert grant is not None and grant["resume_token"], f"call {name} left no session to resume"
    token = await digests.unsealed("phone_call", grant["resume_token"])
    assert token is not None
    return token


def assistant_said(client: Client) -> list[str]:
    return [
        part.transcript or ""
        for event in client.of_type("conversation.item.done")
        if event.item.role == "assistant"
        for part in event.item.content or []
    ]


async def test_calls_outlive_a_redeploy_each_resuming_its_own_session_with_every_item(calls_url: str) -> None:
    calls = {name: TwilioCall(f"{calls_url}/twilio/incoming-call", name) for name in ("a", "b", "c")}
    questions = {"a": (1, 4), "b": (2, 5), "c": (3, 6)}
    async with contextlib.AsyncExitStack() as first_streams:
        streams = {
            name: await first_streams.enter_async_context(call.stream(await call.next(), play_speed=1.0))
            for name, call in calls.items()
        }
        for name, stream in streams.items():
            await stream.until_answered(1, timeout_s=60)
            greeted_at = stream.answers[0].first_audio_at
            assert greeted_at is not None and greeted_at - stream.started_at < GREETED_WITHIN_S, "greeted first"
            await ask(stream, questions[name][0])
        interrupted = streams["b"]
        answered = len(interrupted.answered())
        await interrupted.say(mulaw_question(7) + SILENCE)  # a question, then another over its answer
        await interrupted.until(lambda: interrupted.answers[-1].first_audio_at is not None, timeout_s=60)
        await interrupted.say(mulaw_question(8) + SILENCE)
        await interrupted.until(lambda: bool(interrupted.clears))
        await interrupted.until_answered(answered + 2, timeout_s=60)
        assert not streams["a"].clears and not streams["c"].clears, "only the interrupted call was cleared"

        redeploy = asyncio.create_task(
            asyncio.to_thread(serve.run, build_app(app_config("Version two.")), name=APP, route_prefix="/calls")
        )
        for stream in streams.values():  # each leaves its draining replica between turns
            with pytest.raises(ConnectionError):
                await stream.until(lambda: False, timeout_s=120)
            assert stream.closed is not None and stream.closed[0] == 1012
        await redeploy
    for name, call in calls.items():
        twiml = await call.next()
        assert call.ending is None and twiml.stream_url is not None, "the call goes on"
        async with call.stream(twiml, play_speed=1.0) as again:
            with pytest.raises(TimeoutError):  # a new session would greet at once
                await again.until(lambda again=again: again.answers[0].first_audio_at is not None, GREETED_WITHIN_S)
            await ask(again, questions[name][1])

    for name in calls:
        first, after = questions[name]
        query = {"resume_token": await resume_token_of(name)}
        async with open_client(calls_url.replace("http", "ws", 1), query) as resumed:
            await resumed.until(  # the replay's last item
                lambda e, after=after: e.type == "conversation.item.done" and f"Answer {after}:" in str(e)
            )
            said = assistant_said(resumed)
        assert said[0] == GREETING, "greeted once, on the first stream"
        answers = [text.split(":")[0] for text in said[1:] if ":" in text]
        assert answers[0] == f"Answer {first}" and answers[-1] == f"Answer {after}", said
        theirs = {f"Answer {first}", f"Answer {after}"} | ({"Answer 7", "Answer 8"} if name == "b" else set())
        assert set(answers) <= theirs, f"no other call's words: {said}"


async def test_a_silent_caller_is_asked_once_then_hung_up_and_the_webhook_ends_the_call(calls_url: str) -> None:
    silence = {"prompt_after_s": 1.0, "prompt": "Are you still there?", "hang_up_after_s": 1.0}
    config = app_config("Version three.", hang_up_on_silence=silence)
    await asyncio.to_thread(serve.run, build_app(config), name=APP, route_prefix="/calls")
    silent, talking = (TwilioCall(f"{calls_url}/twilio/incoming-call", name) for name in ("silent", "talking"))
    async with silent.stream(await silent.next()) as quiet, talking.stream(await talking.next()) as answering:
        for stream in (quiet, answering):
            await stream.until_answered(2, timeout_s=60)  # the greeting, then the prompt after a silence
        await ask(answering, 1)
        with pytest.raises(ConnectionError):
            await quiet.until(lambda: False, timeout_s=60)
        assert quiet.closed is not None and quiet.closed[0] == 1000
        assert answering.closed is None, "a caller who answered the prompt stays on"
    assert (await silent.next()).ending == "hang_up", "the call's webhook hangs up"

"""End to end on the real stack: local Ray, CPU models, the stock OpenAI SDK as client.

What the 135M model says varies between runs and machines, and tiny.en may mishear a word of
a question, so the tests assert the protocol, the audio and the isolation, not the answers'
content: what the user said is checked by word error rate, an answer by being non-empty and
voiced (and, once, by its audio transcribing back to its text)."""

import asyncio
import contextlib
import json
import urllib.request

import jiwer
import pytest
import websockets
from ray import serve
from realtime_client import APP_NAME, FINISHED, MAX_SESSIONS, assert_heard, audio_of, is_done, normalise

from handlers.audio import REALTIME_RATE, SPEECH_RATE, pcm16_to_float, resample

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

LONG_QUESTION = "Tell me a long story about a brave knight and a dragon."
SPOKEN_S_PER_WORD = 0.15
"""Less audio than this per word of an answer's transcript means words were never voiced."""


def assert_spoken(client, response_id: str) -> str:
    """A response's answer (whatever it says) was said and its words were voiced; its text."""
    (transcript,) = client.of_type("response.output_audio_transcript.done", response_id)
    words = len(transcript.transcript.split())
    seconds = len(audio_of(client, response_id)) / (2 * REALTIME_RATE)
    assert words > 0, "an empty answer"
    assert seconds >= SPOKEN_S_PER_WORD * words, f"{words} words in {seconds:.1f} s of audio"
    return str(transcript.transcript)


async def test_full_spoken_turn(connect, pcm24k, stt) -> None:
    async with connect() as client:
        await client.send_audio(pcm24k("What is the capital of France?"))
        done = await client.until(is_done)

    assert done.response.status in FINISHED
    (transcription,) = client.of_type("conversation.item.input_audio_transcription.completed")
    assert_heard("What is the capital of France?", transcription.transcript)
    assert [e.type for e in client.events].index("input_audio_buffer.speech_stopped") < [
        e.type for e in client.events
    ].index("response.created")
    text = assert_spoken(client, done.response.id)
    pcm = audio_of(client, done.response.id)
    heard = stt.transcribe(resample(pcm16_to_float(pcm), REALTIME_RATE, SPEECH_RATE))
    # The audio is the answer's text, whatever it says. Characters, not words: tiny.en
    # hears Piper's "France is" as "Francis".
    assert jiwer.cer(normalise(text), normalise(heard)) <= 0.15, (text, heard)


async def test_short_pause_is_not_the_end_of_the_turn(connect, pcm24k) -> None:
    """Speculative work started in a pause is dropped when speech resumes."""
    gap = bytes(REALTIME_RATE * 2 * 3 // 10)  # 300 ms: a pause, shorter than silence_duration_ms
    audio = (
        bytes(REALTIME_RATE * 2)
        + pcm24k("What is the capital of France", 0.0)
        + gap
        + pcm24k("and what is the capital of Germany?", 0.0)
        + bytes(REALTIME_RATE * 2)
    )
    async with connect() as client:
        await client.send_audio(audio)
        done = await client.until(is_done)

    assert len(client.of_type("input_audio_buffer.committed")) == 1
    (transcription,) = client.of_type("conversation.item.input_audio_transcription.completed")
    # Both halves in the one utterance: either half alone is a word error of 0.5.
    both = "What is the capital of France and what is the capital of Germany?"
    assert_heard(both, transcription.transcript, 0.3)
    assert done.response.status in FINISHED


async def test_barge_in_cancels_and_answers_the_new_question(connect, pcm24k) -> None:
    async with connect() as client:
        await client.send_audio(pcm24k(LONG_QUESTION))
        first = await client.until(lambda e: e.type == "response.output_audio.delta")
        await client.send_audio(pcm24k("What is the capital of France?"), realtime=True)
        cancelled = await client.until(lambda e: is_done(e) and e.response.id == first.response_id)
        answered = await client.until(is_done)

    assert cancelled.response.status == "cancelled"
    assert cancelled.response.status_details.reason == "turn_detected"
    types = [e.type for e in client.events]
    after_cancel = client.events[client.events.index(cancelled) :]
    assert not [e for e in after_cancel if getattr(e, "response_id", None) == first.response_id]
    speech_started = [i for i, e in enumerate(client.events) if e.type == "input_audio_buffer.speech_started"]
    old_deltas = [
        i
        for i, e in enumerate(client.events)
        if e.type == "response.output_audio.delta" and e.response_id == first.response_id
    ]
    assert max(old_deltas) < speech_started[1], "old audio after the barge-in's speech_started"
    assert answered.response.status in FINISHED
    # The new question is what was answered: the last utterance heard, then a spoken answer.
    *_, barge_in = client.of_type("conversation.item.input_audio_transcription.completed")
    assert_heard("What is the capital of France?", barge_in.transcript)
    assert_spoken(client, answered.response.id)
    assert types.count("response.done") == 2


async def test_response_cancel_is_client_cancelled_and_silent_after(connect, pcm24k) -> None:
    async with connect() as client:
        await client.send_audio(pcm24k(LONG_QUESTION))
        first = await client.until(lambda e: e.type == "response.output_audio.delta")
        await client.connection.response.cancel()
        cancelled = await client.until(is_done)
        # A later request proves the session still works and flushes anything left in flight.
        await client.connection.response.cancel()
        error = await client.until(lambda e: e.type == "error")

    assert cancelled.response.id == first.response_id
    assert cancelled.response.status == "cancelled"
    assert cancelled.response.status_details.reason == "client_cancelled"
    after = client.events[client.events.index(cancelled) + 1 :]
    assert not [e for e in after if getattr(e, "response_id", None) == first.response_id]
    assert error.error.code == "response_cancel_not_active"


async def test_two_sessions_get_their_own_answers(connect, pcm24k, stt) -> None:
    """Two questions far apart, so that neither what is heard of one nor its answer can pass
    for the other's; each session hears its own, answers it and speaks its own answer."""
    questions = ("What is the capital of France?", "How many legs does a dog have?")

    async def spoken(client) -> str:
        await client.send_audio(pcm24k(questions[0]))
        done = await client.until(is_done)
        return str(done.response.id)

    async def manual(client) -> str:
        """turn_detection null: explicit commit and response.create."""
        await client.connection.session.update(
            session={"type": "realtime", "audio": {"input": {"turn_detection": None}}}
        )
        updated = await client.until(lambda e: e.type == "session.updated")
        assert updated.session.audio.input.turn_detection is None
        await client.send_audio(pcm24k(questions[1]))
        await client.connection.input_audio_buffer.commit()
        await client.until(lambda e: e.type == "input_audio_buffer.committed")
        await client.connection.response.create()
        done = await client.until(is_done)
        assert not client.of_type("input_audio_buffer.speech_started")
        return str(done.response.id)

    async with connect() as first, connect() as second:
        ids = await asyncio.gather(spoken(first), manual(second))
    answers, heard_back = [], []
    for client, question, response_id in zip((first, second), questions, ids, strict=True):
        (heard,) = client.of_type("conversation.item.input_audio_transcription.completed")
        assert_heard(question, heard.transcript)
        answers.append(normalise(assert_spoken(client, response_id)))
        pcm = audio_of(client, response_id)
        heard_back.append(normalise(stt.transcribe(resample(pcm16_to_float(pcm), REALTIME_RATE, SPEECH_RATE))))
    # Neither answer is, or holds, the other's; each session's audio says its own answer.
    assert answers[0] not in answers[1] and answers[1] not in answers[0], answers
    for own, other, back in zip(answers, reversed(answers), heard_back, strict=True):
        assert jiwer.cer(own, back) < jiwer.cer(other, back), (own, other, back)


async def test_create_response_false_truncate_and_clear(connect, pcm24k) -> None:
    async with connect() as client:
        ws = client.connection
        await ws.session.update(
            session={
                "type": "realtime",
                "audio": {"input": {"turn_detection": {"type": "server_vad", "create_response": False}}},
            }
        )
        await client.until(lambda e: e.type == "session.updated")
        await client.send_audio(pcm24k("What is the capital of France?"))
        await client.until(lambda e: e.type == "conversation.item.input_audio_transcription.completed")
        assert not client.of_type("response.created"), "create_response=false still answered"
        await ws.response.create()
        done = await client.until(is_done)
        item_id = done.response.output[0].id
        await ws.conversation.item.truncate(item_id=item_id, content_index=0, audio_end_ms=500)
        truncated = await client.until(lambda e: e.type == "conversation.item.truncated")
        await ws.conversation.item.truncate(item_id=item_id, content_index=0, audio_end_ms=10**6)
        past_the_end = await client.until(lambda e: e.type == "conversation.item.truncated")
        await client.send_audio(bytes(4800))
        await ws.input_audio_buffer.clear()
        await client.until(lambda e: e.type == "input_audio_buffer.cleared")
        await ws.input_audio_buffer.commit()
        empty = await client.until(lambda e: e.type == "error")

    assert done.response.status in FINISHED
    assert (truncated.item_id, truncated.audio_end_ms) == (item_id, 500)
    assert past_the_end.audio_end_ms == 500  # clamped to the audio left, never refused
    assert empty.error.code == "input_audio_buffer_commit_empty"


async def test_bad_input_gets_errors_and_the_session_goes_on(connect) -> None:
    async with connect() as client:
        ws = client.connection
        await ws.send_raw("this is not json")  # type: ignore[attr-defined]
        not_json = await client.until(lambda e: e.type == "error")
        await ws.send_raw(json.dumps({"type": "input_audio_buffer.append", "audio": "***"}))  # type: ignore[attr-defined]
        bad_audio = await client.until(lambda e: e.type == "error")
        await ws.send_raw(json.dumps({"type": "no.such.event", "event_id": "evt_1"}))  # type: ignore[attr-defined]
        unknown = await client.until(lambda e: e.type == "error")
        await ws.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}
        )
        await ws.response.create()
        done = await client.until(is_done)

    assert not_json.error.code == "invalid_json"
    assert bad_audio.error.code == "invalid_value"
    assert unknown.error.code == "invalid_event" and unknown.error.event_id == "evt_1"
    assert done.response.status in FINISHED


async def test_browser_subprotocols_are_answered(realtime_url) -> None:
    """A browser client offers subprotocols and fails the handshake unless one is selected."""
    offered = ["realtime", "openai-insecure-api-key.unused"]
    async with websockets.connect(f"{realtime_url}/realtime?model=s2s", subprotocols=offered) as client:
        created = json.loads(await asyncio.wait_for(client.recv(), 10))
    assert client.subprotocol == "realtime"
    assert created["type"] == "session.created"


async def test_session_cap_refuses_with_an_error(connect, realtime_url) -> None:
    async with contextlib.AsyncExitStack() as sessions:
        for _ in range(MAX_SESSIONS):
            await sessions.enter_async_context(connect())
        async with websockets.connect(f"{realtime_url}/realtime?model=s2s") as extra:
            refusal = json.loads(await asyncio.wait_for(extra.recv(), 10))
            await asyncio.wait_for(extra.wait_closed(), 10)
    assert refusal["type"] == "error" and refusal["error"]["code"] == "session_limit_reached"
    assert extra.close_code == 1013


async def test_disconnect_mid_response_leaves_nothing_behind(connect, pcm24k, realtime_url) -> None:
    async with connect() as client:
        await client.send_audio(pcm24k(LONG_QUESTION))
        await client.until(lambda e: e.type == "response.output_audio.delta")

    llm = serve.get_deployment_handle("LLM", APP_NAME)
    health_url = realtime_url.replace("ws://", "http://").removesuffix("/v1") + "/healthz"

    async def settled() -> bool:
        unfinished = await llm.unfinished_requests.remote()
        health = await asyncio.to_thread(lambda: json.load(urllib.request.urlopen(health_url)))
        return unfinished == 0 and health["sessions"] == 0 and health["scopes"] == 0

    async with asyncio.timeout(20):
        while not await settled():  # the close travels through Serve and Ray: poll until it lands
            await asyncio.sleep(0.2)

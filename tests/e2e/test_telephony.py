"""Phone calls on the real models: Twilio's side (``loadtest.client.twilio_caller``, written from
Twilio's docs) on ``/v1/twilio/media-stream``, a stock SDK client in ``audio/pcmu``, and the
Agents SDK set up as its Twilio example sets it up (G.711 both ways, its ``url`` at us).

What the 135M model says varies, so these assert the protocol, the audio and the isolation:
answers are speech that faster-whisper reads back from the μ-law, each call hears only its
own stream, a spoken barge-in clears the call's audio and a hum does not.
"""

import asyncio
import base64
import json
from collections.abc import Callable

import jiwer
import numpy as np
import pytest
from agents.realtime import RealtimeAgent, RealtimeRunner
from realtime_client import FINISHED, LONG_QUESTION, is_done, normalise

from deployments.realtime.transports.wire_audio import PCMU
from handlers.audio import SPEECH_RATE, resample
from handlers.stt import SpeechToText
from loadtest.client.twilio_caller import TwilioCaller

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

SPOKEN_S_PER_WORD = 0.15
MAX_S_PER_WORD = 1.0
"""Bounds of a spoken answer's length per word of its transcript (Piper speaks ~0.3 s a word)."""
FAST_PLAYBACK = 8.0
"""The simulated phone plays answers this much faster than real time (no test waits for an
answer to be heard out loud)."""
UNGREETED = {"greeting": ""}
"""Calls that speak first: the server's greeting has a test of its own."""
LONG_GREETING = (
    "Hello, and thank you for calling the city library. I can help you find a book, renew your loans, "
    "or tell you our opening hours. How can I help you today?"
)


@pytest.fixture
def mulaw(speak: Callable[..., np.ndarray]) -> Callable[..., bytes]:
    """Spoken text as a phone sends it: μ-law at 8 kHz."""

    def _mulaw(text: str, silence_s: float = 1.0) -> bytes:
        return PCMU.wire_bytes(resample(speak(text, silence_s), SPEECH_RATE, PCMU.rate))

    return _mulaw


def read_back(stt: SpeechToText, mulaw: bytes) -> str:
    return stt.transcribe(resample(PCMU.samples(mulaw), PCMU.rate, SPEECH_RATE))


def assert_voiced_mulaw(mulaw: bytes, transcript: str, heard: str) -> None:
    """The answer's audio is 8 kHz μ-law that carries its transcript: speech is read back from
    it, and it lasts as long as its words take to say (PCM16 taken for μ-law would last half
    as long, 24 kHz for 8 kHz three times as long). Not the words themselves: the 135M model
    answers in French at times, and tiny.en hears English in that."""
    words = len(normalise(transcript).split())
    seconds = len(mulaw) / PCMU.bytes_per_second
    assert normalise(heard), f"no speech in the μ-law of {transcript!r}"
    assert SPOKEN_S_PER_WORD * words <= seconds <= MAX_S_PER_WORD * words + 1.0, (seconds, transcript)


def stream_url(realtime_url: str) -> str:
    return f"{realtime_url}/twilio/media-stream"


async def test_two_phone_calls_are_each_answered_in_speech_read_back_from_their_mulaw(
    realtime_url: str, mulaw: Callable[..., bytes], stt: SpeechToText
) -> None:
    url = stream_url(realtime_url)
    async with (
        TwilioCaller.dial(url, UNGREETED, play_speed=FAST_PLAYBACK, name="paris") as paris,
        TwilioCaller.dial(url, UNGREETED, play_speed=FAST_PLAYBACK, name="moon") as moon,
    ):
        await asyncio.gather(
            paris.say(mulaw("What is the capital of France?")), moon.say(mulaw("Tell me about the moon."))
        )
        for call in (paris, moon):  # each asserts every message it got names its own stream
            await call.until(lambda call=call: bool(call.answered()))
            answer = call.answered()[0]
            assert answer.done is not None and answer.done.rsplit(" ", 1)[1] in FINISHED
            assert normalise(read_back(stt, bytes(answer.audio))), (
                "the answer is speech (the 135M model's may be one word)"
            )
            assert not call.clears


async def test_a_spoken_barge_in_clears_the_call_and_a_hum_does_not(
    realtime_url: str, mulaw: Callable[..., bytes]
) -> None:
    """Played in real time, as a phone plays it: a hum over one answer, then a question
    over the next. Another call on the same replicas is not cleared."""
    url = stream_url(realtime_url)
    async with (
        TwilioCaller.dial(url, UNGREETED, name="cut") as call,
        TwilioCaller.dial(url, UNGREETED, play_speed=FAST_PLAYBACK, name="other") as other,
    ):
        await asyncio.gather(call.say(mulaw(LONG_QUESTION)), other.say(mulaw(LONG_QUESTION)))
        await call.until(lambda: call.answers[-1].first_audio_at is not None)
        await call.say(mulaw("Yeah, right.", silence_s=0.5))
        await call.until(lambda: bool(call.answered()))
        assert not call.clears, "a hum never stops the answer"
        await call.say(mulaw(LONG_QUESTION))
        await call.until(lambda: call.answers[-1].first_audio_at is not None)
        await call.say(mulaw("Stop. What is the capital of Italy?"))
        await call.until(lambda: bool(call.clears))
        await call.until(lambda: len(call.answered()) >= 2)
        assert call.answered()[1].done is not None and call.answered()[1].done.endswith(" cancelled")
        await other.until(lambda: bool(other.answered()))
        assert not other.clears, "the other call played on"


async def test_calls_are_greeted_in_speech_before_they_speak_and_a_question_over_the_greeting_stops_only_it(
    realtime_url: str, mulaw: Callable[..., bytes], speak: Callable[..., np.ndarray], stt: SpeechToText
) -> None:
    """The server's greeting, read back from the μ-law of a call that listens; a call's own
    long greeting (its TwiML parameter), cut by the caller's question in real time: cleared,
    heard only in part, and the question answered. (The suite sends answers as made, so the
    greeting has gone out whole by then: the clear is what stops it.)"""
    url = stream_url(realtime_url)
    greeting_s = len(speak(LONG_GREETING, 0.0)) / SPEECH_RATE
    async with (
        TwilioCaller.dial(url, {"greeting": LONG_GREETING}, name="cuts") as cuts,
        TwilioCaller.dial(url, play_speed=FAST_PLAYBACK, name="listens") as listens,
    ):
        await cuts.until(lambda: cuts.answers[0].first_audio_at is not None)
        await cuts.say(mulaw("Stop. When do you open on Sunday?"))
        await cuts.until(lambda: bool(cuts.clears))
        await cuts.until(lambda: len(cuts.answered()) >= 2)
        heard_s = len(cuts.answered()[0].audio) / PCMU.rate
        assert heard_s < 0.6 * greeting_s, f"the greeting stopped: {heard_s:.1f} s of {greeting_s:.1f} s heard"
        answer = cuts.answered()[1].done
        assert answer is not None and answer.rsplit(" ", 1)[1] in FINISHED, "the question, answered"
        await listens.until(lambda: bool(listens.answered()))
        greeting = listens.answered()[0]
        assert greeting.done is not None and greeting.done.endswith(" completed")
        assert "help" in normalise(read_back(stt, bytes(greeting.audio))).split(), "Hello! How can I help you today?"
        assert not listens.clears, "the other call's greeting played on"


async def test_a_realtime_session_in_pcmu_answers_in_mulaw_that_reads_back_as_its_transcript(
    connect: Callable[..., object], mulaw: Callable[..., bytes], stt: SpeechToText
) -> None:
    async with connect() as client:  # type: ignore[attr-defined]
        audio = {"input": {"format": {"type": "audio/pcmu"}}, "output": {"format": {"type": "audio/pcmu"}}}
        await client.connection.session.update(session={"type": "realtime", "audio": audio})
        updated = await client.until(lambda e: e.type == "session.updated")
        assert updated.session.audio.output.format.type == "audio/pcmu"
        spoken = mulaw("What is the capital of France?")
        for offset in range(0, len(spoken), 800):
            chunk = base64.b64encode(spoken[offset : offset + 800]).decode()
            await client.connection.input_audio_buffer.append(audio=chunk)
        done = await client.until(is_done)
        assert done.response.status in FINISHED
        answer = b"".join(base64.b64decode(e.delta) for e in client.of_type("response.output_audio.delta"))
        [transcript] = [e.transcript for e in client.of_type("response.output_audio_transcript.done")]
        heard = read_back(stt, answer)
        word_error = jiwer.wer(normalise(transcript), normalise(heard))
        print(json.dumps({"mulaw_round_trip_wer": round(word_error, 3), "said": transcript, "heard": heard}))
        assert_voiced_mulaw(answer, transcript, heard)  # the words' error: bench_mulaw's corpus


async def test_the_agents_sdk_set_up_as_its_twilio_example_holds_a_call_in_g711(
    realtime_url: str, mulaw: Callable[..., bytes], stt: SpeechToText
) -> None:
    """The example's model settings (g711_ulaw both ways, server VAD that interrupts), with
    the ``url`` it needs to reach us: the caller's μ-law goes in as it is, and the SDK's audio
    events carry μ-law a phone can play, read back as speech."""
    runner = RealtimeRunner(RealtimeAgent(name="phone", instructions="You are a helpful voice assistant."))
    settings = {
        "input_audio_format": "g711_ulaw",
        "output_audio_format": "g711_ulaw",
        "turn_detection": {"type": "semantic_vad", "interrupt_response": True, "create_response": True},
    }
    session = await runner.run(
        model_config={"url": f"{realtime_url}/realtime", "api_key": "unused", "initial_model_settings": settings}
    )
    played = bytearray()
    errors: list[object] = []
    transcripts: list[str] = []
    async with session:
        spoken = mulaw("What is the capital of France?")
        for offset in range(0, len(spoken), 400):  # the example forwards 50 ms at a time
            await session.send_audio(spoken[offset : offset + 400])
        async with asyncio.timeout(90):
            async for event in session:
                if event.type == "audio":
                    played += event.audio.data
                elif event.type == "error":
                    errors.append(event.error)
                elif event.type == "raw_model_event" and isinstance(data := getattr(event.data, "data", None), dict):
                    if data.get("type") == "response.output_audio_transcript.done":
                        transcripts.append(data["transcript"])
                elif event.type == "agent_end":
                    break
    assert errors == []
    assert_voiced_mulaw(bytes(played), " ".join(transcripts), read_back(stt, bytes(played)))

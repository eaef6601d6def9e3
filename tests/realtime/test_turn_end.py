"""``semantic_vad`` on fake stages (``deployments.realtime.turn_taking.turn_end``): the end-of-turn
model's verdict at each short pause ends the turn, or holds it for more speech.

The fake model calls an utterance complete once it holds more than 1.6 s of audio: one
question tone (1 s, plus the 0.3 s prefix) is "incomplete", two are "complete"."""

import asyncio

import numpy as np
from fakes import FakeStages, Harness, append_audio, speech

from handlers.audio import SPEECH_RATE
from handlers.synthetic import EveryPauseEnds


def semantic(eagerness: str) -> dict[str, object]:
    turn_detection = {"type": "semantic_vad", "eagerness": eagerness}
    return {"type": "realtime", "audio": {"input": {"turn_detection": turn_detection}}}


def complete_when_long(utterance: np.ndarray) -> float:
    return 0.9 if len(utterance) > 1.6 * SPEECH_RATE else 0.1


async def open_semantic(h: Harness, eagerness: str = "auto") -> None:
    h.socket.client_sends(type="session.update", session=semantic(eagerness))
    await h.socket.wait_type("session.updated")


async def test_a_complete_turn_ends_at_a_short_pause() -> None:
    async with Harness() as h:
        await open_semantic(h)
        append_audio(h.socket, speech(1, silence_s=0.3))  # too short a pause for server_vad's 500 ms
        stopped = await h.socket.wait_type("input_audio_buffer.speech_stopped")
        assert 900 <= stopped["audio_end_ms"] <= 1100
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "completed"


async def test_the_verdict_is_asked_when_the_pause_begins_and_the_turn_is_transcribed_once() -> None:
    """Asked at the stop (200 ms in), the verdict would add its own time to every turn, and
    transcribe the utterance a second time beside speculation's transcript of it."""
    stages = FakeStages()
    async with Harness(stages) as h:
        await open_semantic(h)
        append_audio(h.socket, speech(1, silence_s=0.1))  # a pause, not yet a stop
        await stages.until(lambda: stages.message_ends_asked == ["Question one."])
        assert len(stages.end_of_turn_calls) == 1
        assert not h.socket.of_type("input_audio_buffer.speech_stopped")
        append_audio(h.socket, speech(1, seconds=0.0, silence_s=0.2))
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "completed"
        assert len(stages.stt_calls) == 1, "speculation's transcript serves the verdict and the item"
        assert len(stages.end_of_turn_calls) == 1


async def test_an_incomplete_turn_waits_and_the_speech_after_the_pause_continues_it() -> None:
    stages = FakeStages()
    stages.complete_of = complete_when_long
    stages.transcript_of = lambda audio: f"{len(audio) / SPEECH_RATE:.2f}"  # what the STT was given
    async with Harness(stages) as h:
        await open_semantic(h)
        append_audio(h.socket, speech(1, silence_s=0.8) + speech(2, silence_s=0.5))
        stopped = await h.socket.wait_type("input_audio_buffer.speech_stopped")
        await h.socket.wait_type("response.done")
        assert len(h.socket.of_type("input_audio_buffer.speech_started")) == 1, "one utterance"
        assert len(h.socket.of_type("input_audio_buffer.committed")) == 1
        assert stopped["audio_end_ms"] >= 2700, "it ends after the second tone"
        completed = await h.socket.wait_type("conversation.item.input_audio_transcription.completed")
        assert float(completed["transcript"]) > 2.0, "the item is both tones' audio (one is 1.3 s)"


async def test_words_that_do_not_end_a_message_hold_a_turn_that_sounds_complete() -> None:
    """Smart Turn hears "Can you tell me" said like a statement as complete; the LLM reads the
    words as a message that goes on, and the turn waits for the rest."""
    stages = FakeStages()
    stages.transcript_of = lambda audio: "Can you tell me" if len(audio) < 2 * SPEECH_RATE else "the rest"
    stages.message_ends_of = lambda text: 0.001 if text == "Can you tell me" else 0.9
    async with Harness(stages) as h:
        await open_semantic(h)
        append_audio(h.socket, speech(1, silence_s=0.8))
        await stages.until(lambda: stages.message_ends_asked == ["Can you tell me"])  # the pause's verdict
        append_audio(h.socket, speech(2, silence_s=0.5))
        stopped = await h.socket.wait_type("input_audio_buffer.speech_stopped")
        assert stopped["audio_end_ms"] >= 2700, "it ends after the second tone"
        assert len(h.socket.of_type("input_audio_buffer.speech_started")) == 1, "one utterance"
        assert stages.message_ends_asked == ["Can you tell me", "the rest"]


async def test_words_that_end_a_message_end_the_turn_with_the_sound() -> None:
    stages = FakeStages()
    stages.transcript = "What is the capital of France?"
    stages.message_ends_of = lambda text: 0.8
    async with Harness(stages) as h:
        await open_semantic(h)
        append_audio(h.socket, speech(1, silence_s=0.3))
        stopped = await h.socket.wait_type("input_audio_buffer.speech_stopped")
        assert 900 <= stopped["audio_end_ms"] <= 1100
        assert stages.message_ends_asked == ["What is the capital of France?"]


async def test_words_that_surely_end_a_message_end_a_turn_that_sounds_unfinished() -> None:
    """Smart Turn hears a whole question as unfinished; its words say it is whole: the turn
    ends at the pause, and the speech after it is a turn of its own."""
    stages = FakeStages()
    stages.complete_of = lambda utterance: 0.1
    stages.message_ends_of = lambda text: 0.9
    async with Harness(stages) as h:
        await open_semantic(h, "low")  # held, the turn would wait through 3 s of silence
        append_audio(h.socket, speech(1, silence_s=0.3))
        stopped = await h.socket.wait_type("input_audio_buffer.speech_stopped")
        assert 900 <= stopped["audio_end_ms"] <= 1100
        assert stages.message_ends_asked == ["Question one."]


async def test_an_incomplete_turn_ends_when_its_pause_reaches_the_eagerness_bound() -> None:
    stages = FakeStages()
    stages.complete_of = lambda utterance: 0.1
    async with Harness(stages) as h:
        await open_semantic(h, "high")  # an incomplete turn waits through 1 s of silence at most
        append_audio(h.socket, speech(1, silence_s=1.2))
        stopped = await h.socket.wait_type("input_audio_buffer.speech_stopped")
        assert 900 <= stopped["audio_end_ms"] <= 1100
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "completed"


async def test_a_held_turn_ends_when_the_client_stops_sending() -> None:
    """The question and 0.3 s of silence, then nothing (push-to-talk, a script): the bound is
    never reached in input audio, and the turn ends once the audio is that overdue."""
    stages = FakeStages()
    stages.complete_of = lambda utterance: 0.1
    async with Harness(stages) as h:
        await open_semantic(h, "high")
        append_audio(h.socket, speech(1, silence_s=0.3))
        stopped = await h.socket.wait_type("input_audio_buffer.speech_stopped")
        assert 900 <= stopped["audio_end_ms"] <= 1100
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "completed"


async def test_a_slow_stream_still_continues_the_held_turn() -> None:
    """The pause's 0.9 s of silence comes at 0.3 times real time (3 s, past the 1 s bound and
    ``STALLED_INPUT_S`` on the wall clock): audio keeps coming, so the speech after it
    continues the turn."""
    stages = FakeStages()
    stages.complete_of = complete_when_long
    stages.transcript_of = lambda audio: f"{len(audio) / SPEECH_RATE:.2f}"  # what the STT was given
    async with Harness(stages) as h:
        await open_semantic(h, "high")
        append_audio(h.socket, speech(1, silence_s=0.0))
        for _ in range(30):  # the client's pace, not a synchronisation
            append_audio(h.socket, speech(1, seconds=0.0, silence_s=0.03))
            await asyncio.sleep(0.1)
        append_audio(h.socket, speech(2, silence_s=0.5))
        completed = await h.socket.wait_type("conversation.item.input_audio_transcription.completed")
        assert float(completed["transcript"]) > 2.0, "the first item is both tones' audio (one is 1.3 s)"
        assert len(h.socket.of_type("input_audio_buffer.speech_started")) == 1, "one utterance"


async def test_the_bound_is_the_eagerness_one() -> None:
    """The same 1.2 s pause under ``low`` (3 s): the speech after it continues the turn."""
    stages = FakeStages()
    stages.complete_of = complete_when_long
    async with Harness(stages) as h:
        await open_semantic(h, "low")
        append_audio(h.socket, speech(1, silence_s=1.2) + speech(2, silence_s=3.2))
        await h.socket.wait_type("response.done")
        assert len(h.socket.of_type("input_audio_buffer.committed")) == 1


async def test_a_failed_model_ends_the_turn_at_once() -> None:
    stages = FakeStages()

    def broken(utterance: np.ndarray) -> float:
        raise ConnectionError("turn-end replica gone")

    stages.complete_of = broken
    async with Harness(stages) as h:
        await open_semantic(h, "low")
        append_audio(h.socket, speech(1, silence_s=0.3))
        await h.socket.wait_type("input_audio_buffer.committed")
        assert (await h.socket.wait_type("response.done"))["response"]["status"] == "completed"


async def test_sessions_on_the_same_stages_each_end_their_own_turns() -> None:
    """Three sessions share the stages: one pauses mid-turn, one ends at once, one is
    interrupted by its next question."""
    stages = FakeStages()
    stages.complete_of = complete_when_long
    stages.tts_chunk_ms = 3000
    async with Harness(stages, "a") as a, Harness(stages, "b") as b, Harness(stages, "c") as c:
        for h in (a, b, c):
            await open_semantic(h)
        append_audio(a.socket, speech(1, silence_s=0.8) + speech(2, silence_s=0.5))
        append_audio(b.socket, speech(1, seconds=2.0, silence_s=0.5))
        append_audio(c.socket, speech(1, seconds=2.0, silence_s=0.5))
        for h in (a, b, c):
            await h.socket.wait_type("response.output_audio.delta")
        append_audio(c.socket, speech(2, seconds=2.0, silence_s=0.5))
        await c.socket.wait_type("input_audio_buffer.committed", count=2)
        for h in (a, b):
            assert (await h.socket.wait_type("response.done"))["response"]["status"] == "completed"
            assert len(h.socket.of_type("input_audio_buffer.committed")) == 1


async def test_the_synthetic_stand_in_ends_every_turn_at_once() -> None:
    """Serving-layer mode: no deployment, a verdict already given (and nothing to cancel)."""
    stand_in = EveryPauseEnds()
    stand_in.cancel()
    assert await stand_in == 1.0

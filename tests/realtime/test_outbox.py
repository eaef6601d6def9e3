"""What a cancel drops is declared per event type, and what counts is what was sent."""

import base64

from fakes import FakeStages, Harness
from openai.types.realtime import RealtimeResponse, ResponseAudioDeltaEvent, ResponseDoneEvent
from rig import Rig

from deployments.realtime.items import truncate_spoken
from deployments.realtime.outbox import DROPPED_ON_CANCEL, KEPT_ON_CANCEL, SERVER_EVENT_TYPES
from deployments.realtime.protocol import server_event
from deployments.realtime.transports.audio_out import AnswerAudio
from handlers.audio import REALTIME_RATE
from handlers.text import SpeechChunker


def test_every_server_event_type_is_declared_dropped_or_kept_on_cancel() -> None:
    unclassified = SERVER_EVENT_TYPES - DROPPED_ON_CANCEL - KEPT_ON_CANCEL
    assert not unclassified, sorted(event.__name__ for event in unclassified)
    assert not DROPPED_ON_CANCEL & KEPT_ON_CANCEL
    declarable = SERVER_EVENT_TYPES | {AnswerAudio}  # the answer's audio frames, sent as deltas
    assert declarable >= (DROPPED_ON_CANCEL | KEPT_ON_CANCEL), "only protocol events are declared"
    streamed = {
        event for event in SERVER_EVENT_TYPES if event.__name__.startswith("Response") and "Delta" in event.__name__
    }
    assert streamed | {AnswerAudio} == DROPPED_ON_CANCEL, "a response's streamed content, and only that, is dropped"


def pieces(h: Harness, answer: list[str]) -> list[str]:
    """The answer's pieces as the server speaks them."""
    chunker = SpeechChunker(first_chunk_max_words=h.config.first_chunk_words)
    return [piece for delta in answer for piece in chunker.feed(delta)] + list(chunker.flush())


async def test_a_cancel_keeps_the_words_of_the_audio_a_slow_client_was_sent() -> None:
    stages = FakeStages()
    stages.tts_chunks, stages.tts_chunk_ms = 4, 300  # 3 frames of 100 ms a chunk, 12 a piece
    stages.answer = ["The answer is one.", " That is all.", " And that is more."]
    stages.tts_gate.close(after=6)  # TTS has spoken the first piece and half the second
    async with Harness(stages, first_chunk_words=20) as h:  # each sentence a piece
        first, second = pieces(h, stages.answer)[:2]
        assert (first, second) == ("The answer is one.", "That is all.")
        item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi."}]}
        h.socket.client_sends(type="conversation.item.create", item=item)
        h.socket.client_sends(type="response.create")
        read = h.socket.send_text

        async def stops_reading_in_the_second_piece(text: str) -> None:
            await read(text)
            if len(h.socket.of_type("response.output_audio.delta")) == 14:
                h.socket.send_gate.close()

        h.socket.send_text = stops_reading_in_the_second_piece  # type: ignore[method-assign]
        await h.socket.wait_type("response.output_audio.delta", count=14)
        h.socket.client_sends(type="response.cancel")
        await stages.until(lambda: stages.tts_streams[-1].cancelled)  # served, the socket still full
        h.socket.send_gate.open()
        done = await h.socket.wait_type("response.done")
        assert done["response"]["status"] == "cancelled"
        audio = b"".join(base64.b64decode(e["delta"]) for e in h.socket.of_type("response.output_audio.delta"))
        sent_ms = len(audio) * 1000 / (2 * REALTIME_RATE)
        # 14 frames were read, one more was on its way; those queued behind it were dropped.
        assert sent_ms in (1400, 1500)
        # The second piece had 600 ms of audio when it was cut 200-300 ms in: a third or half
        # of its words were heard.
        heard, _ = truncate_spoken([(1200, first), (1800, " " + second)], sent_ms)
        assert heard.startswith(first + " ") and len(heard) < len(first + " " + second)
        assert done["response"]["output"][0]["content"][0]["transcript"] == heard
        item_id = done["response"]["output"][0]["id"]
        h.socket.client_sends(type="conversation.item.truncate", item_id=item_id, content_index=0, audio_end_ms=10**6)
        truncated = await h.socket.wait_type("conversation.item.truncated")
        assert truncated["audio_end_ms"] == sent_ms, "clamped to the audio sent"


async def test_a_held_response_dropped_unseen_sends_nothing_of_it_later() -> None:
    """Held, then cancelled: whatever its tasks still put (audio, its ``response.done``) is
    dropped, and other responses' events go out."""
    async with Rig() as rig:
        rig.outbox.hold("resp_held")
        rig.outbox.put(_audio("resp_held"), "resp_held")
        rig.outbox.cancel("resp_held")
        rig.outbox.put(_audio("resp_held"), "resp_held")  # its playout was still sending
        rig.outbox.put(server_event(ResponseDoneEvent, response=RealtimeResponse(id="resp_held")), "resp_held")
        rig.outbox.put(_audio("resp_shown"), "resp_shown")
        assert [event.get("response_id") for event in await rig.drained()] == ["resp_shown"]


def _audio(response_id: str) -> ResponseAudioDeltaEvent:
    return server_event(
        ResponseAudioDeltaEvent, response_id=response_id, item_id="item", output_index=0, content_index=0, delta="AA=="
    )

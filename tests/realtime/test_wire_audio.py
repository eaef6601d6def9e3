"""Sessions in G.711 (``audio/pcmu``, ``audio/pcma``) beside one in PCM16, on fake stages:
each hears its caller in its own format and answers in it, and a format the server does not
serve is refused with the parameter named."""

import base64
from typing import Any

import pytest
from fakes import FakeStages, Harness, in_format, send_audio, speech

from deployments.realtime.transports.wire_audio import PCM16, PCMA, PCMU

FORMATS = {"audio/pcmu": PCMU, "audio/pcma": PCMA}


def formats_update(wire_type: str, **extra: Any) -> dict[str, Any]:
    wire = {"type": wire_type, **extra}
    return {"type": "realtime", "audio": {"input": {"format": wire}, "output": {"format": wire}}}


async def test_each_session_hears_and_answers_in_its_own_format() -> None:
    stages = FakeStages()
    async with (
        Harness(stages, "u") as mulaw,
        Harness(stages, "a") as alaw,
        Harness(stages, "p") as pcm,
    ):
        sessions = {"audio/pcmu": mulaw, "audio/pcma": alaw, "audio/pcm": pcm}
        for wire_type, h in sessions.items():
            if wire_type != "audio/pcm":
                h.socket.client_sends(type="session.update", session=formats_update(wire_type))
                audio = (await h.socket.wait_type("session.updated"))["session"]["audio"]
                assert audio["input"]["format"] == audio["output"]["format"] == {"type": wire_type}
            send_audio(h.socket, in_format(speech(1), FORMATS.get(wire_type, PCM16)), FORMATS.get(wire_type, PCM16))
        for wire_type, h in sessions.items():
            heard = await h.socket.wait_type("conversation.item.input_audio_transcription.completed")
            assert heard["transcript"] == "Question one.", f"{wire_type}: the caller's audio came through"
            done = (await h.socket.wait_type("response.done"))["response"]
            assert done["status"] == "completed"
            answer = b"".join(base64.b64decode(e["delta"]) for e in h.socket.of_type("response.output_audio.delta"))
            wire = FORMATS.get(wire_type, PCM16)
            spoken_ms = 3 * stages.tts_chunks * stages.tts_chunk_ms
            assert len(answer) == spoken_ms * wire.bytes_per_second // 1000, f"{wire_type}: the answer whole"


@pytest.mark.parametrize(
    ("wire", "code"),
    [
        ({"type": "audio/pcm", "rate": 16000}, "invalid_event"),
        ({"type": "audio/pcmu", "rate": 16000}, "unsupported_value"),
    ],
)
async def test_a_format_not_served_is_refused_and_the_session_keeps_its_own(wire: dict[str, Any], code: str) -> None:
    """The SDK's types refuse PCM at another rate; G.711's have no rate, so ours does."""
    async with Harness() as h:
        h.socket.client_sends(type="session.update", session={"type": "realtime", "audio": {"input": {"format": wire}}})
        error = (await h.socket.wait_type("error"))["error"]
        assert (error["code"], error["param"]) == (code, "session.audio.input.format.rate")
        h.socket.client_sends(type="session.update", session=formats_update("audio/pcmu", rate=8000))
        audio = (await h.socket.wait_type("session.updated"))["session"]["audio"]
        assert audio["input"]["format"] == {"type": "audio/pcmu"}, "8000 is G.711's rate: taken"

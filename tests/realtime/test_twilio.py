"""Twilio media streams on fake stages: the session behind ``TwilioTransport``, fed with
Twilio's messages as its docs give them, beside other calls and a WebSocket session."""

import base64
import json
from typing import Any
from xml.etree import ElementTree

import pytest
from fakes import FakeSocket, FakeStages, Harness, in_format, send_audio, speech

from deployments.realtime.transports.call_control import CallEnding
from deployments.realtime.transports.config import CallControlConfig
from deployments.realtime.transports.keypad import Keypad
from deployments.realtime.transports.twilio import CallPlan, StreamStart, TwilioTransport
from deployments.realtime.transports.twiml import twiml_connect
from deployments.realtime.transports.wire_audio import PCM16, PCMU

QUESTION = 2


class KeptCall:
    """What a call's stream leaves for its next webhook and stream (the store's, in the server)."""

    def __init__(self) -> None:
        self.resume_tokens: list[str] = []
        self.endings: list[CallEnding] = []

    async def resumes_with(self, resume_token: str) -> None:
        self.resume_tokens.append(resume_token)

    async def ends(self, ending: CallEnding) -> None:
        self.endings.append(ending)


class Call:
    """One Twilio call: the stream's socket as Twilio's side of it."""

    def __init__(self, socket: FakeSocket, stream_sid: str, line: KeptCall) -> None:
        self.socket, self.sid, self.line = socket, stream_sid, line
        self.sequence = 0
        self.echoed = 0
        """Marks Twilio's side has echoed so far (``test_call_control.play_out``)."""

    def says(self, event: str, **fields: Any) -> None:
        self.sequence += 1
        message = {"event": event, "sequenceNumber": str(self.sequence), "streamSid": self.sid, **fields}
        self.socket.incoming.put_nowait({"type": "websocket.receive", "text": json.dumps(message)})

    def speaks(self, pcm16: bytes) -> None:
        """24 kHz PCM16 as Twilio sends a caller's voice: μ-law, 20 ms a ``media``."""
        mulaw = in_format(pcm16, PCMU)
        for chunk, offset in enumerate(range(0, len(mulaw), 160), start=1):
            payload = base64.b64encode(mulaw[offset : offset + 160]).decode()
            self.says(
                "media",
                media={"track": "inbound", "chunk": str(chunk), "timestamp": str(20 * chunk), "payload": payload},
            )

    def heard(self, event: str) -> list[dict[str, Any]]:
        return [m for m in self.socket.sent if m.get("event") == event]

    def media_ms(self) -> float:
        return sum(len(base64.b64decode(m["media"]["payload"])) for m in self.heard("media")) / 8


NO_GREETING = CallControlConfig(greeting=None)


def twilio_harness(
    stages: FakeStages, name: str, control: CallControlConfig = NO_GREETING, **session: Any
) -> tuple[Harness, Call]:
    line = KeptCall()
    plan = CallPlan(control, line, None)
    harness = Harness(
        stages,
        name,
        transport=lambda socket: TwilioTransport(socket, StreamStart(f"MZ{name}", f"CA{name}"), plan),
        **session,
    )  # type: ignore[arg-type]
    return harness, Call(harness.socket, f"MZ{name}", line)


async def test_calls_hear_the_caller_in_mulaw_and_answer_in_media_each_with_a_mark() -> None:
    stages = FakeStages()
    (one, call_one), (two, call_two) = twilio_harness(stages, "one"), twilio_harness(stages, "two")
    async with one, two, Harness(stages, "ws") as web:
        call_one.speaks(speech(1))
        call_two.speaks(speech(1))
        send_audio(web.socket, speech(1), PCM16)
        answer_ms = 3 * stages.tts_chunks * stages.tts_chunk_ms
        for call in (call_one, call_two):
            await call.socket.until(lambda call=call: call.media_ms() >= answer_ms)
            assert call.media_ms() == answer_ms, "the answer whole, at 8 kHz"
            sent = call.socket.sent
            assert {m["streamSid"] for m in sent} == {call.sid}, "every message names its own stream"
            await call.socket.until(
                lambda call=call: call.heard("mark")[-1]["mark"]["name"].startswith("response.done")
            )
            *audio, done = sent
            assert [m["event"] for m in audio] == ["media", "mark"] * (len(audio) // 2)
            assert done["mark"]["name"].endswith(" completed"), "the answer's end, as a mark after its audio"
            assert not call.heard("clear")
        assert (await web.socket.wait_type("response.done"))["response"]["status"] == "completed"


async def test_a_barge_in_clears_and_keeps_the_answer_as_far_as_the_marks_say_it_was_heard() -> None:
    stages = FakeStages()
    (cut, caller), (other, other_caller) = twilio_harness(stages, "cut"), twilio_harness(stages, "other")
    async with cut, other:
        for call in (caller, other_caller):
            call.speaks(speech(1))
        answer_ms = 3 * stages.tts_chunks * stages.tts_chunk_ms
        await caller.socket.until(lambda: caller.media_ms() >= answer_ms)
        for mark in caller.heard("mark")[:3]:
            caller.says("mark", mark=mark["mark"])  # Twilio: the audio before it has played
        caller.speaks(speech(QUESTION))
        await caller.socket.until(lambda: bool(caller.heard("clear")))

        def asked() -> list[list[dict[str, str]]]:
            return [r.messages for r in stages.llm_requests if r.ticket.session_id == "cut"]

        await stages.until(lambda: len(asked()) >= 2)
        kept = asked()[1][-2]
        assert kept["role"] == "assistant"
        assert kept["content"] and "The answer is one.".startswith(kept["content"]), "what was heard, not all sent"
        await other_caller.socket.until(lambda: other_caller.media_ms() >= answer_ms)
        assert not other_caller.heard("clear"), "the other call played on"


async def test_a_turn_after_an_answer_that_played_whole_sends_no_clear() -> None:
    stages = FakeStages()
    harness, call = twilio_harness(stages, "whole")

    def answers_done() -> int:
        return sum(m["mark"]["name"].startswith("response.done") for m in call.heard("mark"))

    async with harness:
        call.speaks(speech(1))
        await call.socket.until(lambda: answers_done() == 1)
        for mark in call.heard("mark"):
            call.says("mark", mark=mark["mark"])  # Twilio played it all
        call.speaks(speech(QUESTION))
        await call.socket.until(lambda: answers_done() == 2)
        assert not call.heard("clear"), "nothing was left to clear"


async def test_a_barge_in_over_an_answer_still_going_out_clears_though_twilio_played_all_it_was_sent() -> None:
    stages = FakeStages()
    stages.llm_gate.close(after=2)  # the answer's first sentence, then the model stalls
    harness, call = twilio_harness(stages, "stalled")
    async with harness:
        call.speaks(speech(1))
        await call.socket.until(lambda: call.media_ms() >= stages.tts_chunks * stages.tts_chunk_ms)
        for mark in call.heard("mark"):
            call.says("mark", mark=mark["mark"])  # Twilio played it all: its buffer is empty
        call.speaks(speech(QUESTION))
        await call.socket.until(lambda: bool(call.heard("clear")))
        stages.llm_gate.open()


async def test_a_keypad_entry_becomes_the_callers_message_and_is_answered() -> None:
    stages = FakeStages()
    harness, call = twilio_harness(stages, "keys")
    async with harness:
        for digit in "42#":
            call.says("dtmf", dtmf={"track": "inbound_track", "digit": digit})
        await stages.until(lambda: bool(stages.llm_requests))
        assert stages.llm_requests[0].messages[-1]["content"] == "[The caller typed on the phone's keypad: 4 2 #]"


def test_digits_typed_together_are_one_entry_ended_by_a_pause() -> None:
    now = [0.0]
    keypad = Keypad(clock=lambda: now[0])
    assert keypad.press("1") == [] and keypad.press("2") == []
    now[0] = 1.5
    assert keypad.wait_s() == pytest.approx(0.5)
    now[0] = 2.5
    entry = keypad.flush()
    assert [e.type for e in entry] == ["conversation.item.create", "response.create"]
    assert keypad.wait_s() is None


async def test_bad_messages_are_ignored_and_the_call_goes_on_and_stop_ends_it() -> None:
    stages = FakeStages()
    harness, call = twilio_harness(stages, "bad")
    async with harness:
        call.socket.incoming.put_nowait({"type": "websocket.receive", "text": "not json"})
        call.says("media", media={"payload": "not base64!"})
        call.says("media", media={})
        call.says("dtmf", dtmf={"digit": "x"})
        call.says("surprise")
        call.speaks(speech(1))
        answer_ms = 3 * stages.tts_chunks * stages.tts_chunk_ms
        await call.socket.until(lambda: call.media_ms() >= answer_ms)
        call.says("stop", stop={"accountSid": "AC1", "callSid": "CAbad"})
        assert harness.task is not None
        await harness.task  # the session ended, as on a dropped socket


def test_the_twiml_connects_the_call_to_the_stream_with_its_parameters() -> None:
    twiml = ElementTree.fromstring(twiml_connect("wss://example.com/v1/twilio/media-stream", {"client_secret": 'k"<&'}))
    stream = twiml.find("Connect/Stream")
    assert stream is not None and stream.get("url") == "wss://example.com/v1/twilio/media-stream"
    assert [(p.get("name"), p.get("value")) for p in stream.findall("Parameter")] == [("client_secret", 'k"<&')]

"""A Twilio caller that floods the server, on fake stages: every kind of message it sends
passes the session's input guard, so a flood of any kind is hung up (1008) while another
call goes on; its log, its keypad entry and the marks awaiting its echo stay bounded."""

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from fakes import FakeStages, speech
from test_twilio import Call, twilio_harness

from deployments.realtime.limits import Violation
from deployments.realtime.session_config import InputLimits
from deployments.realtime.transports.audio_out import AnswerAudio
from deployments.realtime.transports.keypad import MAX_ENTRY_DIGITS, Keypad
from deployments.realtime.transports.twilio import LOGGED_PROBLEMS, MAX_PENDING_MARKS, TwilioAudio
from deployments.realtime.transports.wire_audio import PCMU

FLOOD = 5000
HANG_UP_WITHIN_S = 10.0


def not_json(call: Call) -> None:
    call.socket.incoming.put_nowait({"type": "websocket.receive", "text": "not json"})


FLOODS: dict[str, Callable[[Call], None]] = {
    "marks": lambda call: call.says("mark", mark={"name": str(call.sequence)}),
    "not json": not_json,
    "digits": lambda call: call.says("dtmf", dtmf={"track": "inbound_track", "digit": "1"}),
    "unknown events": lambda call: call.says("surprise"),
    "media without payload": lambda call: call.says("media", media={}),
}


def twilio_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "deployments.realtime.transports.twilio"]


@pytest.mark.parametrize("flood", list(FLOODS), ids=list(FLOODS))
async def test_a_flood_of_any_kind_is_hung_up_while_another_call_goes_on(
    flood: str, caplog: pytest.LogCaptureFixture
) -> None:
    stages = FakeStages()
    (flooding, flooder), (quiet, caller) = twilio_harness(stages, "flood"), twilio_harness(stages, "quiet")
    async with flooding, quiet:
        for _ in range(FLOOD):
            FLOODS[flood](flooder)
        assert flooding.task is not None
        async with asyncio.timeout(HANG_UP_WITHIN_S):  # hung up within the limit, or this fails
            await flooding.task
        assert flooder.socket.closed == (1008, "too_many_violations")
        assert flooder.socket.incoming.qsize() > FLOOD // 2, "hung up long before the flood was through"

        caller.speaks(speech(1))
        answer_ms = 3 * stages.tts_chunks * stages.tts_chunk_ms
        await caller.socket.until(lambda: caller.media_ms() >= answer_ms)
        assert caller.socket.closed is None
    warnings = twilio_warnings(caplog)
    assert len(warnings) <= LOGGED_PROBLEMS + 1, warnings
    assert "closed with 1008 (too_many_violations)" in warnings[-1] and "more problems" in warnings[-1]


async def test_bad_messages_a_call_survives_are_logged_a_few_then_counted_as_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stages = FakeStages()
    harness, call = twilio_harness(
        stages,
        "noisy",
        limits=InputLimits(strikes=10 * FLOOD, event_burst=10 * FLOOD),  # survives: only the log is looked at
    )
    async with harness:
        for _ in range(1000):
            not_json(call)
        call.speaks(speech(1))
        answer_ms = 3 * stages.tts_chunks * stages.tts_chunk_ms
        await call.socket.until(lambda: call.media_ms() >= answer_ms)
        call.says("stop")
        assert harness.task is not None
        await harness.task
    warnings = twilio_warnings(caplog)
    assert len(warnings) == LOGGED_PROBLEMS + 1, warnings
    assert all("not Twilio's" in line for line in warnings[:LOGGED_PROBLEMS])
    assert warnings[-1].endswith("more problems, not logged") and "stopped" in warnings[-1]


async def test_a_keypad_entry_holds_at_most_its_digits_and_the_extra_are_refused() -> None:
    stages = FakeStages()
    harness, call = twilio_harness(stages, "keys")
    extra = 8  # refused, each a strike: fewer than hang up
    async with harness:
        for _ in range(MAX_ENTRY_DIGITS + extra):
            call.says("dtmf", dtmf={"track": "inbound_track", "digit": "1"})
        call.says("dtmf", dtmf={"track": "inbound_track", "digit": "#"})
        await stages.until(lambda: bool(stages.llm_requests))
        typed = " ".join("1" * MAX_ENTRY_DIGITS + "#")
        assert stages.llm_requests[0].messages[-1]["content"] == f"[The caller typed on the phone's keypad: {typed}]"
        assert call.socket.closed is None


def test_a_full_keypad_entry_refuses_digits_but_still_ends_with_a_hash() -> None:
    keypad = Keypad()
    for _ in range(MAX_ENTRY_DIGITS):
        assert keypad.press("7") == []
    with pytest.raises(Violation):
        keypad.press("7")
    entry = keypad.press("#")[0].model_dump()
    assert entry["item"]["content"][0]["text"].count("7") == MAX_ENTRY_DIGITS
    assert keypad.press("7") == [], "a new entry begins"


async def test_marks_a_peer_never_echoes_are_bounded_and_the_played_position_stays_low() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    audio = TwilioAudio(send, "MZmarks")  # type: ignore[arg-type]
    frames = 4 * MAX_PENDING_MARKS
    for _ in range(frames):
        await audio.play(AnswerAudio("resp", "item", 0, PCMU, bytes(4800)))  # 100 ms each
    names = [m["mark"]["name"] for m in sent if m["event"] == "mark"]
    assert len(names) == frames
    audio.echoed(names[frames - MAX_PENDING_MARKS - 1])  # the newest forgotten: tells nothing
    assert audio.played_ms("resp") == 0.0
    audio.echoed(names[frames - MAX_PENDING_MARKS])  # the oldest kept
    assert audio.played_ms("resp") == pytest.approx((frames - MAX_PENDING_MARKS + 1) * 100)
    audio.echoed(names[-1])
    assert audio.played_ms("resp") == pytest.approx(frames * 100)

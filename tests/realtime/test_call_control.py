"""A phone call's control on fake stages: the greeting, ``end_call`` and ``transfer_call``
acted on once the agent's sentence has played, the hang-up on silence, and the leave of a
draining replica between turns; each beside calls that go on."""

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fakes import FakeStages, speech
from pydantic import ValidationError
from test_twilio import QUESTION, Call, twilio_harness

from deployments.realtime import spoken_lines
from deployments.realtime.protocol import CLOSE_NORMAL, CLOSE_SERVICE_RESTART
from deployments.realtime.transports.call_control import CallEnding
from deployments.realtime.transports.config import CallControlConfig, HangUpOnSilence
from handlers.tools import FunctionCallArguments, FunctionCallStarted

GREETING = "Hello, this is the front desk."


def play_out(call: Call) -> None:
    """Twilio's side plays everything sent so far: each mark comes back."""
    for mark in call.heard("mark")[call.echoed :]:
        call.says("mark", mark=mark["mark"])
    call.echoed = len(call.heard("mark"))


def done_marks(call: Call) -> list[str]:
    return [m["mark"]["name"] for m in call.heard("mark") if m["mark"]["name"].startswith("response.done")]


def asked(stages: FakeStages, name: str) -> list[list[dict[str, Any]]]:
    return [request.messages for request in stages.llm_requests if request.ticket.session_id == name]


def says_then_calls(function: str) -> list[Any]:
    return ["Goodbye.", FunctionCallStarted(0, "call_1", function), FunctionCallArguments(0, "{}")]


async def test_calls_are_greeted_before_the_caller_speaks_and_a_barge_in_stops_only_its_own_greeting() -> None:
    stages = FakeStages()
    greeted = CallControlConfig(greeting=GREETING)
    (heard, listener), (cut, interrupter) = (
        twilio_harness(stages, "heard", greeted),
        twilio_harness(stages, "cut", greeted),
    )
    async with heard, cut:
        greeting_ms = stages.tts_chunks * stages.tts_chunk_ms
        for call in (listener, interrupter):
            await call.socket.until(lambda call=call: call.media_ms() >= greeting_ms and bool(done_marks(call)))
        assert stages.llm_requests == [], "a greeting is said as it is, without the LLM"
        interrupter.speaks(speech(QUESTION))
        await interrupter.socket.until(lambda: bool(interrupter.heard("clear")))
        play_out(listener)
        listener.speaks(speech(QUESTION))
        await stages.until(lambda: bool(asked(stages, "heard")) and bool(asked(stages, "cut")))
        assert asked(stages, "heard")[0][-2] == {"role": "assistant", "content": GREETING}, "the greeting, heard whole"
        assert GREETING not in [m["content"] for m in asked(stages, "cut")[0]], (
            "only what was heard of the cut greeting"
        )


async def test_a_call_without_a_greeting_waits_for_the_caller() -> None:
    stages = FakeStages()
    harness, call = twilio_harness(stages, "quiet", CallControlConfig(greeting=None))
    async with harness:
        call.speaks(speech(1))
        await call.socket.until(lambda: bool(done_marks(call)))
        assert len(done_marks(call)) == 1 and len(stages.llm_requests) == 1, "one answer: the caller's"


async def test_end_call_ends_the_call_once_its_sentence_has_played_and_only_where_offered() -> None:
    stages = FakeStages()
    stages.answer = says_then_calls("end_call")
    offered = CallControlConfig(greeting=None, end_call=True)
    (ends, ending), (goes_on, going_on) = twilio_harness(stages, "ends", offered), twilio_harness(stages, "goes_on")
    async with ends, goes_on:
        for call in (ending, going_on):
            call.speaks(speech(1))
            await call.socket.until(lambda call=call: bool(done_marks(call)))
        tools = {r.ticket.session_id: r.tools for r in stages.llm_requests}
        assert tools["ends"] is not None and [f.name for f in tools["ends"].functions] == ["end_call"]
        assert tools["goes_on"] is None, "not offered where not configured"
        assert ending.socket.closed is None and ending.line.endings == [], "not before the goodbye has played"
        play_out(ending)
        play_out(going_on)
        await ending.socket.until(lambda: ending.socket.closed is not None)
        assert ending.socket.closed == (CLOSE_NORMAL, "hang_up")
        assert ending.line.endings == [CallEnding("hang_up")], "the call's next webhook hangs up"
        going_on.speaks(speech(QUESTION))
        await going_on.socket.until(lambda: len(done_marks(going_on)) == 2)
        assert going_on.socket.closed is None


async def test_transfer_call_dials_the_configured_number_once_its_sentence_has_played() -> None:
    stages = FakeStages()
    stages.answer = says_then_calls("transfer_call")
    harness, call = twilio_harness(stages, "transfer", CallControlConfig(greeting=None, transfer_to="+15550100"))
    async with harness:
        call.speaks(speech(1))
        await call.socket.until(lambda: bool(done_marks(call)))
        assert call.socket.closed is None
        play_out(call)
        await call.socket.until(lambda: call.socket.closed is not None)
        assert call.line.endings == [CallEnding("transfer", "+15550100")]


async def test_a_silent_caller_is_asked_once_then_hung_up_while_one_who_answers_is_not() -> None:
    stages = FakeStages()
    silence = HangUpOnSilence.model_construct(prompt_after_s=0.2, prompt="Are you still there?", hang_up_after_s=0.2)
    control = CallControlConfig(greeting=GREETING, hang_up_on_silence=silence)
    (gone, silent), (back, answering) = twilio_harness(stages, "gone", control), twilio_harness(stages, "back", control)
    async with gone, back:
        for call in (silent, answering):
            await call.socket.until(lambda call=call: bool(done_marks(call)))
            play_out(call)  # the greeting has played: the silence counts from here
            await call.socket.until(lambda call=call: len(done_marks(call)) == 2)
            assert call.socket.closed is None, "asked first"
        assert stages.llm_requests == [], "the prompt is said as it is"
        answering.speaks(speech(QUESTION))
        await answering.socket.until(lambda: len(done_marks(answering)) == 3)
        play_out(silent)
        await silent.socket.until(lambda: silent.socket.closed is not None)
        assert silent.line.endings == [CallEnding("hang_up")]
        assert answering.socket.closed is None, "a caller who answered stays on"


async def test_a_draining_call_leaves_between_turns_never_mid_answer() -> None:
    stages = FakeStages()
    (busy, answered), (idle, waiting) = (
        twilio_harness(stages, "busy", drain_notice=True),
        twilio_harness(stages, "idle", drain_notice=True),
    )
    async with busy, idle:
        answered.speaks(speech(1))
        await answered.socket.until(lambda: bool(done_marks(answered)))
        busy.session.draining(30.0)
        idle.session.draining(30.0)
        await waiting.socket.until(lambda: waiting.socket.closed is not None)
        assert waiting.socket.closed is not None and waiting.socket.closed[0] == CLOSE_SERVICE_RESTART
        assert answered.socket.closed is None, "its answer is still playing"
        play_out(answered)
        await answered.socket.until(lambda: answered.socket.closed is not None)
        assert answered.socket.closed is not None and answered.socket.closed[0] == CLOSE_SERVICE_RESTART
        assert answered.line.endings == [], "the call goes on: its next stream resumes the session"


async def test_the_servers_lines_are_synthesised_once_ahead_and_retried_while_the_tts_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spoken_lines, "WARM_RETRY_S", 0.0)
    tries: list[str] = []

    def starting_tts(text: str) -> AsyncIterator[bytes]:
        """A TTS deployment still starting: its first call fails."""
        tries.append(text)

        async def chunks() -> AsyncIterator[bytes]:
            if len(tries) == 1:
                raise ConnectionError("no replica yet")
            yield text.encode()

        return chunks()

    lines = spoken_lines.SpokenLines()
    await lines.warm([GREETING], starting_tts)  # type: ignore[arg-type]
    kept = lines.kept(GREETING)
    assert tries == [GREETING, GREETING]
    assert kept is not None and [chunk async for chunk in kept] == [GREETING.encode()]
    assert lines.kept("Anything else.") is None, "only the server's own lines are kept"


def test_an_ending_reads_back_as_written_and_transfers_go_only_to_a_dialable_number() -> None:
    for ending in (CallEnding("hang_up"), CallEnding("transfer", "+15550123"), CallEnding("transfer", "sip:a@b.c")):
        assert CallEnding.parse(str(ending)) == ending
    assert CallEnding.parse("") is None
    for bad in ("5550123", "+1 555 0123", "<Hangup/>", "+15550123</Dial><Play>x"):
        with pytest.raises(ValidationError):
            CallControlConfig(transfer_to=bad)

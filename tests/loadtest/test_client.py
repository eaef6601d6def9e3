"""The load client, cheap and still exact: its frames are the question's audio, paced without
drift; every server message reaches it in order; against the echo server it counts stale
audio to the byte and answers, barge-ins and cancels as they happened."""

import asyncio
import base64
import binascii
import json
import math
import random
import time
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from deployments.realtime.protocol import parse_client_event
from deployments.realtime.timeline import TIMINGS_KEY as SERVER_TIMINGS_KEY
from deployments.realtime.turn_taking.config import InterruptionRules
from handlers.audio import REALTIME_RATE
from loadtest import cli
from loadtest.client import report, report_plots
from loadtest.client.microphone import FRAME_BYTES, FRAME_MS, SILENCE_EVENT, Microphone, spoken_frames
from loadtest.client.prompts import PromptSet, tone_prompts
from loadtest.client.records import TIMINGS_KEY, Resume, SessionLog, Turn
from loadtest.client.run import LoadConfig, LoadResult
from loadtest.client.session import Session, TurnDetection, settings_update
from loadtest.client.session_log import SessionListener
from loadtest.client.wire import TICK_S, DeliveringConnection, audio_size, running_metronome
from loadtest.doubles.echo_server import ANSWER_S, EchoServer

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""

ANSWER_BYTES = int(ANSWER_S * REALTIME_RATE) * 2


@given(st.binary(max_size=5000))
def test_audio_size_of_base64_is_its_bytes(pcm: bytes) -> None:
    assert audio_size(base64.b64encode(pcm).decode()) == len(pcm)


@given(st.text(alphabet="AQgw+/=\n -é_", max_size=24))
def test_audio_size_is_what_decoding_gives_whatever_the_text(text: str) -> None:
    try:
        expected: int | type[Exception] = len(base64.b64decode(text))
    except (binascii.Error, ValueError) as error:
        expected = type(error)
    if isinstance(expected, int):
        assert audio_size(text) == expected
    else:
        with pytest.raises(expected):
            audio_size(text)


def test_a_question_goes_out_as_its_audio_in_frames() -> None:
    prompt = tone_prompts().prompts[7]
    frames = spoken_frames(prompt)
    events = [json.loads(event) for event, _ in frames]
    assert {event["type"] for event in events} == {"input_audio_buffer.append"}
    assert b"".join(base64.b64decode(event["audio"]) for event in events) == prompt.pcm16
    assert all(len(base64.b64decode(event["audio"])) <= FRAME_BYTES for event in events)
    ends = [end for _, end in frames]
    assert ends == sorted(ends) and ends[-1] == pytest.approx(prompt.seconds)
    assert spoken_frames(prompt) is frames  # built once
    assert base64.b64decode(json.loads(SILENCE_EVENT)["audio"]) == bytes(FRAME_BYTES)


async def test_the_metronome_paces_without_drift() -> None:
    """20 frames 50 ms apart, each after 20 ms of work: due times, not intervals, so the
    work does not add up (sleeping 50 ms after each would take 1.4 s)."""
    metronome = running_metronome()
    start = time.monotonic()
    for frame in range(1, 21):
        time.sleep(0.02)
        await metronome.until(start + frame * 0.05)
        assert time.monotonic() >= start + frame * 0.05 - 1e-3  # never early
    assert time.monotonic() - start < 1.2


async def test_sleepers_of_one_tick_share_its_timer_and_wake_without_a_cancelled_one() -> None:
    metronome = running_metronome()
    deadline = time.monotonic() + 0.05
    sleepers = [asyncio.ensure_future(metronome.until(deadline)) for _ in range(3)]
    await asyncio.sleep(0)
    assert [len(waiters) for waiters in metronome._due.values()] == [3]
    sleepers[0].cancel()
    await asyncio.wait_for(asyncio.gather(*sleepers[1:]), 1.0)
    assert sleepers[0].cancelled() and time.monotonic() >= deadline - 1e-3
    assert metronome._due == {}
    assert running_metronome() is metronome and TICK_S <= 0.01


async def test_every_message_reaches_the_handler_in_order() -> None:
    """What came with the handshake, a fragmented message, a binary one; pings still work."""

    async def talk(ws: ServerConnection) -> None:
        await ws.send('{"n": 1}')
        await ws.send(['{"n": ', "2}"])  # two frames
        await ws.send(b'{"n": 3}')
        await ws.wait_closed()

    got: list[tuple[bytes, bool]] = []
    async with serve(talk, "127.0.0.1", 0) as server:
        port = list(server.sockets)[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", create_connection=DeliveringConnection) as ws:
            assert isinstance(ws, DeliveringConnection)
            await asyncio.sleep(0.2)  # all of it has been read before a handler is given
            ws.deliver_to(lambda data, text: got.append((data, text)))
            assert await asyncio.wait_for(await ws.ping(), 5) >= 0
    assert got == [(b'{"n": 1}', True), (b'{"n": 2}', True), (b'{"n": 3}', False)]


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoServer]:
    server = EchoServer(deflate=True)
    yield server
    server.close()


@pytest.fixture(scope="module")
def stale_echo() -> Iterator[EchoServer]:
    server = EchoServer(deflate=True, stale=True)
    yield server
    server.close()


class Dice(random.Random):
    """Scripted rolls: whether to interrupt an answer, when (``uniform``: 0 is as soon as the
    session listens, its question's trailing silence sent), the next answer's."""

    def __init__(self, *rolls: float) -> None:
        super().__init__()
        self._rolls = list(rolls)

    def random(self) -> float:
        return self._rolls.pop(0) if self._rolls else 0.99


def _session(
    url: str,
    prompts: PromptSet,
    index: int,
    dice: Dice,
    interrupt: float,
    cancel: float,
    compression: str | None = None,
    continuous_mic: bool = False,
    backchannel: float = 0.0,
    pause: float = 0.0,
) -> Session:
    """A session answered in 1 s of streaming (the echo server's), asking questions index, index + 1."""
    answering = dict.fromkeys(range(len(prompts.prompts)), 1.0)
    order = [index, index + 1]
    return Session(
        index,
        url,
        prompts,
        order,
        dice,
        interrupt,
        cancel,
        lambda _: None,
        answering,
        compression,
        continuous_mic,
        backchannel_rate=backchannel,
        pause_rate=pause,
    )


def _result(logs: list[SessionLog], prompts: PromptSet) -> LoadResult:
    """A load run of ``logs``, for the report."""
    config = LoadConfig("ws://echo", len(logs), 2, 0.0, 0.5, 0.0, None, 0, calibrate=False)
    now = time.monotonic()
    return LoadResult(config, prompts, "echo", now - 10, now, logs, {}, [], {}, 0.0)


def _clean(log: SessionLog) -> None:
    assert not log.disconnected and log.errors == {} and log.done_without_created == 0
    assert log.stale == {}
    assert all(not turn.timed_out and turn.response is not None for turn in log.turns)


async def test_sessions_against_the_echo_server(echo: EchoServer) -> None:
    prompts = tone_prompts()
    started = time.monotonic()
    plain, barging, cancelling = await asyncio.gather(
        _session(echo.url, prompts, 0, Dice(), 0.0, 0.0).run(1, math.inf),
        _session(echo.url, prompts, 1, Dice(0.0, 0.0), 0.5, 0.0).run(1, math.inf),  # barge in
        _session(echo.url, prompts, 2, Dice(0.0, 0.0), 0.0, 0.5).run(1, math.inf),  # cancel
    )
    for log in (plain, barging, cancelling):
        _clean(log)
        assert log.model == "echo"

    (turn,) = plain.turns
    assert turn.speech_end_at is not None and turn.speech_end_at - started >= turn.prompt.seconds  # real time
    assert turn.heard == "Question 1." and turn.response is not None
    assert turn.response.status == "completed" and turn.response.audio_bytes == ANSWER_BYTES

    first, spoken = barging.turns  # the barge-in was the next question, answered in full
    assert first.interruption == "barge-in" and first.barge_in_heard_at is not None
    assert first.response is not None and first.response.status == "cancelled"
    assert 0 < first.response.audio_bytes < ANSWER_BYTES
    assert spoken.response is not None and spoken.response.audio_bytes == ANSWER_BYTES

    (cancelled,) = cancelling.turns
    assert cancelled.interruption == "cancel" and cancelled.response is not None
    assert cancelled.response.status == "cancelled" and 0 < cancelled.response.audio_bytes < ANSWER_BYTES


async def test_stale_audio_is_counted_to_the_byte_by_kind_and_response(stale_echo: EchoServer) -> None:
    """The broken echo server sends, after every ``response.done``, one frame of audio of that
    response and one of a response it never created: each is filed under its response and
    kind, with the events that came before it."""
    prompts = tone_prompts()
    plain, cancelling = await asyncio.gather(
        _session(stale_echo.url, prompts, 0, Dice(), 0.0, 0.0).run(1, math.inf),
        _session(stale_echo.url, prompts, 1, Dice(0.0, 0.0), 0.0, 0.5).run(2, math.inf),  # cancel, then ask again
    )
    responses = [turn.response for log in (plain, cancelling) for turn in log.turns]
    assert [response.status if response else None for response in responses] == ["completed", "cancelled", "completed"]
    assert responses[0] is not None and responses[0].audio_bytes == ANSWER_BYTES
    for log in (plain, cancelling):
        answered = [turn.response.id for turn in log.turns if turn.response]
        assert {rid: (s.kind, s.bytes, s.deltas) for rid, s in log.stale.items()} == {
            **dict.fromkeys(answered, ("after_done", FRAME_BYTES, 1)),
            **{f"{rid}_uncreated": ("never_created", FRAME_BYTES, 1) for rid in answered},
        }
        for rid in answered:
            assert log.stale[rid].events_before[-2:] == [
                f"response.done {rid}",
                f"response.output_audio.delta {rid}",
            ]
    summary = report.summarize(_result([plain, cancelling], prompts))
    counts = summary["counts"]
    assert counts["stale_bytes_after_done"] == counts["stale_bytes_never_created"] == 3 * FRAME_BYTES
    assert counts["stale_bytes"] == 6 * FRAME_BYTES
    assert sorted(record["kind"] for record in summary["stale"]) == ["after_done"] * 3 + ["never_created"] * 3
    assert "| stale_bytes_never_created | " + str(3 * FRAME_BYTES) + " |" in report.markdown(summary)


async def test_deflate_is_offered_only_when_asked(echo: EchoServer) -> None:
    prompts = PromptSet("none", [], [])

    async def offered(compression: str | None) -> int:
        before = (echo.stats() or {})["extensions_offered"]
        log = await _session(echo.url, prompts, 0, Dice(), 0.0, 0.0, compression).run(0, 0)
        assert log.model == "echo"
        return int((echo.stats() or {})["extensions_offered"] - before)

    assert await offered(None) == 0
    assert await offered("deflate") == 1


def test_the_benchmark_reports_cpu_per_session_second(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--sessions", "2", "--duration-s", "1", "--ramp-s", "0", "--configs", "client_off", "deflate"]
    assert cli.main(["client", *argv]) == 0
    report = json.loads(capsys.readouterr().out)
    for name, negotiated in (("client_off", False), ("deflate", True)):
        result = report["results"][name]["2"]
        assert result["client_cpu_ms_per_session_s"] > 0 and result["server_cpu_ms_per_session_s"] > 0
        assert bool(result["negotiated"]) == negotiated
        assert result["turns"] >= 2 and result["stale_bytes"] == result["timeouts"] == result["disconnects"] == 0


async def test_a_backchannel_the_server_takes_for_an_interruption_is_counted_as_such(echo: EchoServer) -> None:
    """The echo server's rule is OpenAI's (every onset interrupts): the hum said over the
    answer cuts it, which the session files under the backchannel."""
    log = await _session(echo.url, tone_prompts(), 0, Dice(0.0, 0.0), 0.0, 0.0, backchannel=1.0).run(1, math.inf)
    _clean(log)
    (turn,) = log.turns
    assert turn.interruption == "backchannel" and turn.interrupted_at is not None
    assert turn.response is not None and turn.response.status == "cancelled"


async def test_a_question_the_server_answers_at_its_pause_is_counted_cut_off_and_its_answer_is_the_last(
    echo: EchoServer,
) -> None:
    """The echo server ends a question at 500 ms of silence, so it answers the first half of a
    paused question, then cancels that answer when the rest is spoken (OpenAI's rule) and
    answers the whole turn: the turn is cut off once, answered by the last response, and no
    response goes unasked."""
    log = await _session(echo.url, tone_prompts(), 0, Dice(0.0), 0.0, 0.0, pause=1.0).run(1, math.inf)
    _clean(log)
    assert log.unasked_responses == 0
    (turn,) = log.turns
    assert turn.paused and turn.prompt.seconds > tone_prompts().prompts[0].seconds
    (cut_off,) = turn.cut_off_by
    assert cut_off.status == "cancelled" and cut_off.id not in log.stale
    assert turn.response is not None and turn.response.status == "completed"
    assert turn.response.created_at > cut_off.created_at
    assert turn.speech_end_at is not None and turn.speech_stopped_at is not None
    assert turn.speech_stopped_at > turn.speech_end_at  # the turn's end, not its pause
    resumes_at_s = turn.prompt.resumes_at_s
    assert turn.resumed_at_ms is not None and resumes_at_s is not None
    assert turn.resumed_at_ms == pytest.approx(1000 * resumes_at_s)  # the session's first audio


def test_a_response_after_the_rest_of_a_paused_question_was_sent_is_still_told_by_position() -> None:
    """A slow server's events come late: the response to the first half of a paused question
    may arrive after all of it was sent. The stop's position, not the time, says it was cut
    off; the response after the stop past the pause is the turn's answer."""
    listener = SessionListener(SessionLog(0))
    turn = Turn(0, 0, tone_prompts().paused[0], paused=True, resumed_at_ms=2000.0, speech_end_at=5.0)
    listener.expect(turn)
    for event in (
        {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 1300},  # at the pause
        {"type": "response.created", "response": {"id": "resp_cut"}},
        {"type": "input_audio_buffer.speech_stopped", "audio_end_ms": 2700},  # past it: the turn's end
        {"type": "response.created", "response": {"id": "resp_whole"}},
    ):
        listener.on_event(event, 6.0)
    assert [r.id for r in turn.cut_off_by] == ["resp_cut"]
    assert turn.response is not None and turn.response.id == "resp_whole"
    assert listener.log.unasked_responses == 0


@pytest.mark.parametrize("kind", ["server_vad", "semantic_vad"])
@pytest.mark.parametrize("our_rules", [False, True])
def test_the_turn_detection_a_session_asks_for_is_one_the_server_takes(kind: TurnDetection, our_rules: bool) -> None:
    event = parse_client_event(settings_update(kind, our_rules)).model_dump(exclude_none=True)
    assert "noise_reduction" not in event["session"]["audio"]["input"]
    detection = event["session"]["audio"]["input"]["turn_detection"]
    assert detection["type"] == kind
    assert ("interruption" in detection) == our_rules
    if our_rules:  # the client's copy of our defaults is the server's
        assert InterruptionRules(**detection["interruption"]) == InterruptionRules()


def test_noise_reduction_alone_leaves_the_turn_detection_as_it_is() -> None:
    event = parse_client_event(settings_update(None, False, "far_field")).model_dump(exclude_none=True)
    assert event["session"]["audio"]["input"] == {"noise_reduction": {"type": "far_field"}}


def test_a_response_to_no_question_is_counted() -> None:
    listener = SessionListener(SessionLog(0))
    listener.on_message(b'{"type": "response.created", "response": {"id": "resp_1"}}', True)
    assert listener.log.unasked_responses == 1


def test_the_timings_a_response_done_tells_reach_the_report_under_the_servers_key() -> None:
    assert TIMINGS_KEY == SERVER_TIMINGS_KEY
    listener = SessionListener(SessionLog(0))
    listener.expect(turn := Turn(0, 0, tone_prompts().prompts[0], speech_end_at=5.0))
    told = {"end_of_turn_wait_ms": 612.5, "first_audio_ms": 1480.0}
    metadata = {"topic": "x", TIMINGS_KEY: json.dumps(told)}
    listener.on_event({"type": "response.created", "response": {"id": "resp_1"}}, 6.0)
    listener.on_event(
        {"type": "response.done", "response": {"id": "resp_1", "status": "completed", "metadata": metadata}}, 7.0
    )
    assert turn.response is not None and turn.response.server_timings == told
    latencies = report_plots.turn_latencies(turn)
    assert (latencies["server_end_of_turn_wait_ms"], latencies["server_first_audio_ms"]) == (612.5, 1480.0)


def test_a_malformed_event_is_counted_and_the_session_goes_on() -> None:
    listener = SessionListener(SessionLog(0))
    listener.on_message(b"not json", True)
    listener.on_message(b'"\xff"', True)
    listener.on_message(b'{"type": "response.done"}', True)  # no response in it
    listener.on_message(b'{"type": "session.created", "session": {"model": "echo"}}', True)
    assert listener.log.errors == {"client:JSONDecodeError": 1, "client:UnicodeDecodeError": 1, "client:KeyError": 1}
    assert listener.log.model == "echo"


@pytest.mark.parametrize("continuous", [False, True])
async def test_a_continuous_microphone_streams_between_questions(echo: EchoServer, continuous: bool) -> None:
    """With ``continuous_mic`` a frame goes out every 100 ms for the whole session, waiting
    and listening included; without it, audio goes out only around questions."""
    prompts = tone_prompts()
    session = _session(echo.url, prompts, 0, Dice(), 0.0, 0.0, continuous_mic=continuous)
    before = (echo.stats() or {})["events_in"]
    started = time.monotonic()
    log = await session.run(2, math.inf)
    frames_due = (time.monotonic() - started) * 1000 / FRAME_MS
    _clean(log)
    sent = (echo.stats() or {})["events_in"] - before
    if continuous:
        assert 0.8 * frames_due <= sent <= 1.1 * frames_due, (sent, frames_due)
    else:
        assert sent < 0.8 * frames_due, (sent, frames_due)


class RecordingSocket:
    def __init__(self) -> None:
        self.sent: list[tuple[float, str]] = []

    async def send(self, event: str) -> None:
        self.sent.append((time.monotonic(), event))


async def test_a_voice_said_over_another_takes_the_microphone_and_audio_stays_real_time() -> None:
    """A question said in a backchannel's trailing silence (as the next turn is, once the
    answer is over): one microphone, so the question's frames go out whole and in a row,
    and never more audio than real time (the two voices' frames in turn were twice that,
    and the server heard hum and question as one utterance)."""
    prompts = tone_prompts()
    assert prompts.backchannel is not None
    question = prompts.prompts[5]
    microphone = Microphone()
    socket = microphone.ws = RecordingSocket()
    started = time.monotonic()
    hum = asyncio.ensure_future(microphone.say(prompts.backchannel))
    await asyncio.sleep(prompts.backchannel.seconds + 0.3)  # the question begins 0.3 s into the silence
    await microphone.say(question)
    await hum
    events = [event for _, event in socket.sent]
    frames = [event for event, _ in spoken_frames(question)]
    first = events.index(frames[0])
    assert events[first : first + len(frames)] == frames
    assert events[first + len(frames) :] == [SILENCE_EVENT] * int(1000 / FRAME_MS)  # its own silence only
    sent_s = sum(audio_size(json.loads(event)["audio"]) for event in events) / (2 * REALTIME_RATE)
    assert sent_s <= socket.sent[-1][0] - started + 2 * FRAME_MS / 1000


def test_the_longest_silence_inside_an_answer_is_measured_as_a_listener_hears_it() -> None:
    """100 ms of audio at 1.0 s and at 1.05 s play on without a break; the next at 1.5 s
    comes 0.3 s after the listener ran out."""
    listener = SessionListener(SessionLog(0))
    turn = Turn(0, 0, tone_prompts().prompts[0])
    listener.expect(turn)
    listener.on_event({"type": "response.created", "response": {"id": "resp_1"}}, 0.0)
    delta = base64.b64encode(bytes(2 * REALTIME_RATE // 10)).decode()
    for now in (1.0, 1.05, 1.5):
        listener.on_event({"type": "response.output_audio.delta", "response_id": "resp_1", "delta": delta}, now)
    assert turn.response is not None and turn.response.longest_gap_s == pytest.approx(0.3)


def test_a_resumed_connection_files_its_replay_and_counts_the_items_it_lacks() -> None:
    """The items a resumed session replays (right after ``session.created``) are filed as the
    replay; items the client saw finished and the replay lacks are lost, counted from the
    oldest one replayed (older ones the server's history cap let go); an answer in flight
    when a connection ends ends ``connection_lost``."""
    log = SessionLog(0)
    first = SessionListener(log)

    def done(item_id: str) -> dict[str, object]:
        return {"type": "conversation.item.done", "item": {"id": item_id}}

    first.on_event({"type": "session.created", "session": {"model": "m", "resume_token": "sess_a.t1"}}, 0.0)
    for item_id in ("i1", "i2", "i3", "i4"):
        first.on_event(done(item_id), 1.0)
    first.on_event({"type": "response.created", "response": {"id": "r5"}}, 2.0)
    first.connection_ended()
    assert first.resume_token == "sess_a.t1" and log.disconnected
    assert first._responses["r5"].status == "connection_lost" and first._responses["r5"].done.is_set()

    resume = Resume("1006", 3.0, list(log.finished_items))
    again = SessionListener(log, resume)
    again.on_event({"type": "session.created", "session": {"model": "m", "resume_token": "sess_a.t2"}}, 3.5)
    for item_id in ("i2", "i4"):  # i1: past the history cap; i3: lost
        again.on_event({"type": "conversation.item.added", "item": {"id": item_id}}, 3.5)
        again.on_event(done(item_id), 3.5)
    again.on_event({"type": "input_audio_buffer.speech_started"}, 4.0)
    again.on_event(done("i5"), 5.0)
    assert resume.resumed_at == 3.5 and not log.disconnected and again.resume_token == "sess_a.t2"
    assert resume.items_replayed == ["i2", "i4"] and resume.items_lost == 1
    assert log.finished_items == ["i1", "i2", "i3", "i4", "i5"], "the replay is not counted twice"
    assert Resume("1006", 0.0, ["i1"]).items_lost == 0, "not resumed: nothing counted as lost"

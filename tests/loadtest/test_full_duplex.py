"""``s2s-bench turns``'s Full-Duplex-Bench-style figures: the ``fdb`` summary of a mode's
parts, and the session settings each round opens with (``--noise-reduction``), against the
load client's echo server."""

import argparse
import asyncio
import io
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from handlers.audio import float_to_pcm16
from loadtest.benchmarks import full_duplex, turns
from loadtest.client import spoken_turns
from loadtest.doubles.echo_server import EchoServer

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""


def fdb_latencies(p50: float) -> dict[str, float | None]:
    return {"p50": p50, "p95": p50 + 100, "n": 4}


PARTS: dict[str, Any] = {
    "paused": {"sentences": 4, "cut_off": 0, "taken_over": 1, "spoke_over": 0},
    "backchannels": {"said": 7, "answers_lost": 0, "new_turns": 1, "taken_over": 0},
    "voice_to_voice": {"turns": 5, "asked": 5, "answered": 5, "voice_to_voice_ms": fdb_latencies(900)},
    "interruptions": {
        "said": 4,
        "missed": 0,
        "taken_over": 3,
        "fdb": {
            "onset_to_last_heard_ms": fdb_latencies(40),
            "onset_to_speech_started_ms": fdb_latencies(500),
            "speech_end_to_answer_ms": fdb_latencies(1200),
        },
    },
    "webrtc": {"fdb": {"onset_to_silence_ms": fdb_latencies(30), "onset_to_last_sound_ms": fdb_latencies(400)}},
}


def test_the_summary_gives_each_scenario_its_take_over_rate_and_latencies() -> None:
    fdb = full_duplex.summary(PARTS)
    assert fdb["pause_handling"] == {"tor": 0.25, "of": 4}
    assert fdb["backchannel"] == {"tor": 0.0, "of": 7}
    assert fdb["smooth_turn_taking"] == {"tor": 1.0, "of": 5, "latency_ms": fdb_latencies(900)}
    interruption = fdb["user_interruption"]
    assert (interruption["tor"], interruption["of"]) == (0.75, 4)
    assert interruption["stop_latency_ms"]["p50"] == 40 and interruption["response_latency_ms"]["p50"] == 1200
    assert fdb["onset_to_stopped_ms"] == {"websocket": fdb_latencies(40), "webrtc": fdb_latencies(400)}


def test_the_summary_holds_only_the_parts_that_ran() -> None:
    assert full_duplex.summary({"paused": PARTS["paused"]}) == {"pause_handling": {"tor": 0.25, "of": 4}}
    assert full_duplex.summary({}) == {}
    assert full_duplex.rate(0, 0) is None


def test_percentiles_of_nothing_are_none() -> None:
    assert full_duplex.p50_p95([]) == {"p50": None, "p95": None, "n": 0}
    assert full_duplex.p50_p95([100.0, 200.0]) == {"p50": 150.0, "p95": 195.0, "n": 2}


def test_a_webrtc_answer_stopped_where_the_last_silence_before_the_next_began() -> None:
    frames = [i * 0.02 for i in range(50)]  # 1 s of the answer's sound
    paused_and_resumed = frames[:10] + [0.5 + t for t in frames]  # a 0.3 s pause at 0.18 s, then 1 s more
    new_answer = [3.0 + t for t in frames]
    sound = paused_and_resumed + new_answer
    assert turns.last_sound_before_gap(sound, 0.1, 3.05) == pytest.approx(1.48)
    assert turns.last_sound_before_gap(sound, 0.1, 1.0) == pytest.approx(0.18)  # the pause, before the resume
    assert turns.last_sound_before_gap([], 0.1, 3.0) == 0.1
    assert turns.first_silence_after(sound, 0.1) == pytest.approx(0.18)


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    turns.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_noise_reduction_is_off_unless_asked_and_only_openai_s_kinds_are_taken() -> None:
    assert parsed().noise_reduction is None
    assert parsed("--noise-reduction", "far_field").noise_reduction == "far_field"
    with pytest.raises(SystemExit):
        parsed("--noise-reduction", "loud")
    mode = turns.MODES["semantic_vad"]
    assert spoken_turns.session_input(mode) == {"turn_detection": mode}
    assert spoken_turns.session_input(mode, "near_field")["noise_reduction"] == {"type": "near_field"}
    assert "phone" in parsed().parts and parsed().parts == list(turns.PARTS)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer(deflate=False)
    yield server
    server.close()


async def test_each_round_asks_for_the_noise_reduction_in_its_session_update(echo: EchoServer) -> None:
    url = echo.url.removesuffix("/realtime")
    for noise_reduction in (None, "near_field"):
        async with spoken_turns.new_round(url, turns.MODES["server_vad"], noise_reduction) as round_:
            updated = next(e for _, e in round_.log if e.type == "session.updated")
        sent = updated.session.audio.input
        assert sent.turn_detection.type == "server_vad"
        if noise_reduction is None:
            assert sent.noise_reduction is None
        else:
            assert sent.noise_reduction.type == noise_reduction


def test_the_phone_is_heard_until_its_last_sound_before_the_clear() -> None:
    """A paced answer runs out before the ``clear``: the caller last hears the end of the
    last frame played, cut at the ``clear`` if it was still playing then."""
    played = [(10.0, 0.02), (10.02, 0.02), (10.04, 0.02)]  # the answer's last frames, ending 10.06
    assert full_duplex.last_played(played, onset=10.0, clear=10.3) == pytest.approx(10.06)
    assert full_duplex.last_played(played, onset=10.0, clear=10.05) == pytest.approx(10.05)
    assert full_duplex.last_played(played, onset=10.1, clear=10.3) == 10.1, "silent from the onset on"


def over_answer(
    kind: str, *, cleared: bool = False, answer: str = "playing on", new_answer_ms: float | None = None
) -> dict[str, Any]:
    return {
        "kind": kind,
        "said": kind,
        "barged_in": cleared or answer == "cancelled",
        "answer": answer,
        "clear_ms": 400.0 if cleared else None,
        "cancelled_ms": 450.0 if answer == "cancelled" else None,
        "last_sound_ms": 250.0 if cleared or answer == "cancelled" else None,
        "new_answer_ms": new_answer_ms,
    }


def paused(responses: int, began: bool = False, spoke: bool = False) -> dict[str, Any]:
    return {"kind": "paused", "said": "a | b", "responses": responses, "began_in_it": began, "spoke_over": spoke}


PHONE_ROUNDS = [
    over_answer("interruption", cleared=True, answer="cancelled", new_answer_ms=800.0),
    over_answer("interruption", answer="cancelled", new_answer_ms=900.0),  # no clear: nothing was left to play
    over_answer("interruption", cleared=True, answer="cancelled"),  # stopped, but no new answer came
    over_answer("interruption"),  # missed: no clear, the answer played on
    over_answer("backchannel"),
    over_answer("backchannel", cleared=True, answer="cancelled", new_answer_ms=700.0),  # a false barge-in
    over_answer("backchannel", new_answer_ms=1200.0),  # no barge-in, but a new answer after it
    over_answer("cough", cleared=True),
    over_answer("cough"),
    paused(1),
    paused(2, began=True, spoke=True),  # answered in the pause, then again
    paused(1, began=True),  # a response began (and ended) in the pause: the sentence was one answer still
]


def test_the_phone_counts_a_clear_or_a_cancelled_answer_as_a_barge_in() -> None:
    phone = full_duplex.phone_summary(PHONE_ROUNDS)
    assert phone["interruptions"] == {"said": 4, "missed": 1, "taken_over": 2}
    assert phone["backchannels"] == {
        "backchannels": 3,
        "coughs": 2,
        "false_barge_ins": {"backchannel": 1, "cough": 1},
        "taken_over": 3,
    }
    assert phone["paused"] == {"sentences": 3, "cut_off": 1, "taken_over": 2, "spoke_over": 1}
    fdb = phone["fdb"]
    assert (fdb["user_interruption_tor"], fdb["backchannel_tor"], fdb["pause_handling_tor"]) == (0.5, 0.6, 0.667)
    assert fdb["onset_to_clear_ms"]["n"] == 2, "only the rounds with a clear"
    assert fdb["onset_to_cancelled_ms"]["n"] == fdb["onset_to_last_heard_ms"]["n"] == 3, "every interruption stopped"
    assert fdb["speech_end_to_answer_ms"] == full_duplex.p50_p95([800.0, 900.0]), (
        "only the interruptions that barged in"
    )
    assert full_duplex.phone_summary([])["interruptions"] == {"said": 0, "missed": 0, "taken_over": 0}
    closed = {"kind": "backchannel", "said": "Yeah.", "failed": "ConnectionError: the stream closed"}
    with_a_failure = full_duplex.phone_summary([*PHONE_ROUNDS, closed])
    assert with_a_failure["backchannels"] == phone["backchannels"], "a failed call is no trial"
    assert with_a_failure["failed_calls"] == ["backchannel 'Yeah.': ConnectionError: the stream closed"]
    assert phone["failed_calls"] == []


def wideband_parts() -> dict[str, Any]:
    backchannels: dict[str, Any] = {
        **PARTS["backchannels"],
        "said": 5,
        "backchannels": 3,
        "coughs": 2,
        "false_barge_ins": {"backchannel": 0, "cough": 1},
        "taken_over": 1,
    }
    return {**PARTS, "backchannels": backchannels, "phone": full_duplex.phone_summary(PHONE_ROUNDS)}


def test_the_phone_is_set_beside_the_24_khz_figures_in_points() -> None:
    rows = full_duplex.summary(wideband_parts())["phone_vs_24khz"]
    backchannel = rows["false_barge_ins_backchannel"]
    assert backchannel["24khz"] == {"count": 0, "of": 3, "rate": 0.0}
    assert backchannel["phone"] == {"count": 1, "of": 3, "rate": 0.333}
    assert (backchannel["points"], backchannel["worse"]) == (33.3, True)
    assert (rows["false_barge_ins_cough"]["points"], rows["false_barge_ins_cough"]["worse"]) == (0.0, False)
    assert rows["missed_interruptions"]["points"] == 25.0, "1 of 4 on the phone, 0 of 4 over the WebSocket"
    assert rows["pause_cut_offs"]["24khz"] == {"count": 0, "of": 4, "rate": 0.0}
    assert (rows["pause_tor"]["points"], rows["pause_tor"]["worse"]) == (41.7, True), "2 of 3 against 1 of 4"
    better = rows["backchannel_tor"]
    assert better["points"] == 40.0 and better["worse"], "3 of 5 against 1 of 5"


def test_a_phone_figure_with_no_24_khz_run_beside_it_is_not_judged() -> None:
    parts = {"phone": full_duplex.phone_summary(PHONE_ROUNDS)}
    rows = full_duplex.summary(parts)["phone_vs_24khz"]
    assert rows["missed_interruptions"] == {
        "24khz": None,
        "phone": {"count": 1, "of": 4, "rate": 0.25},
        "points": None,
        "worse": None,
    }
    only_interruptions = {"phone": full_duplex.phone_summary(PHONE_ROUNDS[:4]), "interruptions": PARTS["interruptions"]}
    assert set(full_duplex.summary(only_interruptions)["phone_vs_24khz"]) == {"missed_interruptions"}
    assert "phone" in full_duplex.summary(only_interruptions)["onset_to_stopped_ms"]


def test_the_phone_table_has_a_row_per_figure_and_marks_what_is_worse() -> None:
    parts = wideband_parts()
    parts["fdb"] = full_duplex.summary(parts)
    lines = full_duplex.phone_table({"semantic_vad": parts, "settings": {"repeat": 1}})
    assert lines[0].startswith("| mode |") and len(lines) == 2 + len(full_duplex.PHONE_ROWS) + 1
    assert "| semantic_vad | false barge-ins on backchannels | 0 of 3 | 1 of 3 | +33.3 **worse** |" in lines
    assert any(
        "onset → stopped" in line and "400 / 400 ms (`clear`, 2)" in line and "(last heard, 3)" in line
        for line in lines
    )
    assert full_duplex.phone_table({"settings": {}}) == []


class FakeCall:
    """What ``PhoneLine`` needs of a ``TwilioCaller``: its frames, and when each went."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    async def say(self, mulaw: bytes, realtime: bool = True) -> None:
        assert not realtime
        self.frames.append(mulaw)


async def test_a_phone_line_sends_silence_between_what_is_said_in_whole_frames() -> None:
    call = FakeCall()
    async with full_duplex.PhoneLine(call) as line:  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
        began, ended = await line.say(b"\x01" * 400)  # 2.5 frames
        await asyncio.sleep(0.05)
    assert ended - began == pytest.approx(0.04, abs=0.03), "three frames, 20 ms apart"
    assert all(len(frame) == 160 for frame in call.frames)
    said = [i for i, frame in enumerate(call.frames) if frame[0] == 1]
    assert len(said) == 3 and said == list(range(said[0], said[0] + 3))
    assert call.frames[said[-1]] == b"\x01" * 80 + b"\xff" * 80, "the last frame is filled with silence"
    assert said[0] >= 1 and len(call.frames) > said[-1] + 1, "silence before and after"
    assert all(set(frame) == {0xFF} for i, frame in enumerate(call.frames) if i not in said)


async def test_a_call_gets_no_greeting_and_its_turn_detection_through_a_client_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert await full_duplex.phone_parameters("ws://h/v1", {}) == {"greeting": ""}, "the server's default: no secret"
    asked: list[urllib.request.Request] = []
    shown = {"type": "semantic_vad"}

    class Reply(io.BytesIO):
        def __enter__(self) -> "Reply":
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    def urlopen(request: urllib.request.Request, timeout: float) -> Reply:
        asked.append(request)
        return Reply(json.dumps({"value": "ek_1", "session": {"audio": {"input": {"turn_detection": shown}}}}).encode())

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    mode = turns.MODES["semantic_vad"]
    assert await full_duplex.phone_parameters("ws://h:1/v1", mode, "near_field") == {
        "greeting": "",
        "client_secret": "ek_1",
    }
    assert asked[0].full_url == "http://h:1/v1/realtime/client_secrets"
    sent = json.loads(asked[0].data)  # type: ignore[arg-type]
    assert sent["session"]["audio"]["input"] == {"turn_detection": mode, "noise_reduction": {"type": "near_field"}}
    shown = {"type": "server_vad"}  # a server that would not open the call with the mode asked for
    with pytest.raises(AssertionError):
        await full_duplex.phone_parameters("ws://h:1/v1", mode)


class ToneSpeaker:
    """Says everything as 1 s of a tone that fades in and out (with quiet places for a pause)."""

    def speech(self, text: str) -> bytes:
        t = np.arange(24_000) / 24_000
        return float_to_pcm16((0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(np.pi * 3 * t) ** 2).astype(np.float32))


def test_the_phone_says_what_the_24_khz_rounds_say() -> None:
    said = turns.phone_rounds(ToneSpeaker(), repeat=2)  # type: ignore[arg-type]
    kinds = [kind for kind, _, _ in said]
    assert kinds.count("interruption") == 2 * len(turns.INTERRUPTIONS)
    assert kinds.count("backchannel") == 2 * len([b for b in turns.BACKCHANNELS if b])
    assert kinds.count("cough") == 2 * turns.BACKCHANNELS.count(None)
    assert kinds.count("paused") == len(turns.PAUSED)
    assert all(len(audio) < 2 * 24_000 for kind, _, audio in said if kind != "cough"), "8 kHz μ-law, 1 byte a sample"

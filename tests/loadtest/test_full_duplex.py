"""``s2s-bench turns``'s Full-Duplex-Bench-style figures: the ``fdb`` summary of a mode's
parts, and the session settings each round opens with (``--noise-reduction``), against the
load client's echo server."""

import argparse
from collections.abc import Iterator

import pytest

from loadtest.benchmarks import full_duplex, turns
from loadtest.client import spoken_turns
from loadtest.doubles.echo_server import EchoServer

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""


def fdb_latencies(p50: float) -> dict[str, float | None]:
    return {"p50": p50, "p95": p50 + 100, "n": 4}


PARTS = {
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

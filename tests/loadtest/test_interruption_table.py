"""``s2s-bench interruption-table``: its audio paths, its counts and its rule search (fast), and a
smoke-size run with the real models (``models``) whose report holds what the docs quote."""

import json

import numpy as np
import pytest

from handlers.audio import SPEECH_RATE
from loadtest import cli
from loadtest.benchmarks import interruption_table as table
from loadtest.benchmarks.backchannel_words import Looks, onset, padded
from loadtest.benchmarks.threshold_rules import best_rule


def tone(seconds: float = 1.0, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(seconds * SPEECH_RATE)) / SPEECH_RATE
    return (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


GAIN = {"websocket": 1.0, "phone": 1.0, "webrtc": 0.5**0.5}
"""What each path does to the level: Opus is decoded to stereo, and the server's resampler to
mono (libswresample's downmix, as ``deployments/realtime/transports/webrtc.py`` asks) takes 3 dB off."""


@pytest.mark.fast
@pytest.mark.parametrize("path", table.PATHS)
def test_each_path_hands_the_vad_as_many_samples_and_keeps_a_voice_band_tone(path: str) -> None:
    sent = tone()
    heard = table.through(path, sent)
    assert heard.shape == sent.shape and heard.dtype == np.float32
    middle = slice(SPEECH_RATE // 4, 3 * SPEECH_RATE // 4)  # past any codec's or filter's delay
    level = np.sqrt(np.mean(sent[middle] ** 2)) * GAIN[path]
    assert np.sqrt(np.mean(heard[middle] ** 2)) == pytest.approx(level, rel=0.05)


@pytest.mark.fast
def test_the_phone_path_loses_what_is_above_its_band() -> None:
    high = table.through("phone", tone(hz=6000.0))
    assert np.sqrt(np.mean(high[SPEECH_RATE // 4 :] ** 2)) < 0.01


@pytest.mark.fast
def test_a_padded_sound_keeps_its_onset() -> None:
    sound = np.concatenate([np.zeros(800, np.float32), tone(0.3)])
    clip, at = padded(sound)
    assert at == int(0.5 * SPEECH_RATE) + onset(sound) == int(0.5 * SPEECH_RATE) + 800
    assert clip.size == sound.size + int(1.5 * SPEECH_RATE)


def overlap(kind: str) -> table.Overlap:
    return table.Overlap(kind, kind, np.zeros(10, np.float32))


def heard(index: int, real: bool, at_ms: int | None = None, pending: bool = False) -> table.Heard:
    return table.Heard(index, Looks(real, at_ms if real else None, ["x"], pending), None, None)


@pytest.mark.fast
def test_noise_alone_is_never_counted_a_real_interruption() -> None:
    made = [overlap(kind) for kind in table.KINDS]  # backchannel, cough, laugh, noise, short, long
    row = table.table_row(
        [
            heard(0, False),
            heard(1, True, 200),
            heard(2, False),
            heard(3, True, -40),
            heard(4, True, 300),
            heard(5, True, 700),
        ],
        made,
    )
    assert row["positives"] == 2  # short and long only
    assert row["final"] == {"precision": 0.5, "recall": 1.0, "true_positives": 2, "false_positives": 2}
    assert row["within_500ms"] == {"precision": 0.333, "recall": 0.5, "true_positives": 1, "false_positives": 2}
    assert row["false_barge_in_noise_alone"] == 1.0 and row["taken"]["noise"] == "1/1"
    assert row["taken_before_onset"] == 1
    assert row["decided_at_ms"] == {"p50": 500.0, "p95": 680.0}


@pytest.mark.fast
def test_nothing_taken_has_no_precision_rather_than_a_perfect_one() -> None:
    row = table.table_row([heard(0, False, pending=True), heard(1, False)], [overlap("noise"), overlap("short")])
    assert row["final"]["precision"] is None and row["final"]["recall"] == 0.0
    assert row["pending_at_end"] == 1


@pytest.mark.fast
def test_the_rule_search_finds_the_threshold_that_separates_and_keeps_to_the_precision_asked() -> None:
    rng = np.random.default_rng(1)
    rows: list[tuple[dict[str, float] | None, bool]] = []
    for index in range(200):
        real = index % 2 == 0
        rows.append(({"voiced_ms": (200 if real else 60) + rng.normal(0, 20), "rms_db": rng.normal(-30, 5)}, real))
    rows.append((None, True))  # no onset heard: never taken
    rule = best_rule(rows, min_precision=0.95)
    assert rule.parts[0][:2] == ("voiced_ms", ">=") and 100 < rule.parts[0][2] < 160
    taken = [real for features, real in rows if rule(features)]
    assert sum(taken) / len(taken) >= 0.95 and sum(taken) >= 95
    assert not rule(None)


@pytest.mark.fast
def test_the_noise_conditions_come_off_and_on_for_each_background_and_snr() -> None:
    names = [c.name for c in table.conditions([20.0, 5.0], "pink")]
    assert names[:4] == [
        "websocket/clean/denoiser_off",
        "webrtc/clean/denoiser_off",
        "phone/clean/denoiser_off",
        "websocket/clean/denoiser_on",
    ]
    assert "websocket/babble_5db/denoiser_on" in names and "websocket/pink_20db/denoiser_off" in names
    assert len(names) == len(set(names)) == 4 + 2 * 2 * 2


@pytest.mark.fast
def test_the_background_lead_is_the_track_just_before_the_clips_piece_at_the_same_gain() -> None:
    speech = tone(0.5)
    track = np.linspace(1.0, 2.0, 10 * SPEECH_RATE, dtype=np.float32)  # a ramp: where a piece is shows
    level = float(np.mean(speech**2))
    clip, lead = table.with_background(speech, track, 10.0, level, np.random.default_rng(3), lead_s=1.0)
    added = (clip - speech).astype(np.float64)
    assert lead.size == SPEECH_RATE and clip.size == speech.size
    assert np.mean(added**2) == pytest.approx(level / 10, rel=1e-3)  # 10 dB under, over the clip's own piece
    steps = np.diff(np.concatenate([lead, added]))  # one piece of the ramp, one gain: even steps
    assert np.allclose(steps, steps[0], rtol=1e-3, atol=1e-7) and steps[0] > 0
    quiet, silence = table.with_background(speech, None, None, level, np.random.default_rng(3))
    assert quiet is speech and silence.size == int(table.SETTLE_S * SPEECH_RATE) and not silence.any()


@pytest.mark.fast
def test_off_and_on_hear_the_same_clip_and_other_overlaps_other_noise() -> None:
    backgrounds = object.__new__(table.Backgrounds)
    backgrounds.tracks = {"pink": np.random.default_rng(0).standard_normal(5 * SPEECH_RATE).astype(np.float32)}
    backgrounds.speech_power = 0.01
    sound = table.Overlap("short", "stop", tone(0.4))
    off, on = (table.Condition("websocket", "pink", 10.0, denoise) for denoise in (False, True))
    clip_off, at_off, lead_off = table.clip_for(sound, off, backgrounds, table.clip_rng(1, 7, off))
    clip_on, at_on, lead_on = table.clip_for(sound, on, backgrounds, table.clip_rng(1, 7, on))
    assert at_off == at_on and np.array_equal(clip_off, clip_on) and np.array_equal(lead_off, lead_on)
    other, _, _ = table.clip_for(sound, off, backgrounds, table.clip_rng(1, 8, off))
    assert not np.array_equal(other, clip_off)


@pytest.mark.fast
def test_a_settled_state_goes_on_as_if_the_lead_and_the_clip_were_one_stream() -> None:
    from handlers.denoise import Denoiser, DenoiserState

    denoiser = Denoiser()
    rng = np.random.default_rng(2)
    lead = (0.05 * rng.standard_normal(SPEECH_RATE)).astype(np.float32)
    clip = (tone(0.5) + 0.05 * rng.standard_normal(SPEECH_RATE // 2)).astype(np.float32)
    settled = denoiser.denoise(table.settled_state(denoiser, lead), clip)
    whole = denoiser.denoise(DenoiserState("near_field"), np.concatenate([lead, clip]))
    assert np.allclose(settled, whole[lead.size :], atol=1e-5)
    fresh = denoiser.denoise(DenoiserState("near_field"), clip)
    assert not np.allclose(settled[: SPEECH_RATE // 10], fresh[: SPEECH_RATE // 10], atol=1e-3)


@pytest.mark.models
def test_a_smoke_run_reports_every_condition_and_the_faster_stop(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["interruption-table", "--quick", "--no-wer"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    overlaps = report["overlaps"]
    assert set(overlaps) == set(table.KINDS) and all(overlaps.values())
    assert len(report["conditions"]) == 4 + 2 * 2  # one SNR at --quick
    assert report["denoiser_lead_s"] == table.SETTLE_S
    for row in report["conditions"].values():
        assert row["overlaps"] == sum(overlaps.values())
        assert row["positives"] == overlaps["short"] + overlaps["long"]  # noise, coughs, laughs never count
        taken = {kind: int(count.split("/")[0]) for kind, count in row["taken"].items()}
        assert row["final"]["true_positives"] == taken["short"] + taken["long"]
        assert row["final"]["false_positives"] == sum(taken[k] for k in ("backchannel", "cough", "laugh", "noise"))
        assert row["false_barge_in_noise_alone"] == taken["noise"] / overlaps["noise"]
    for pool in ("all_conditions", "no_background"):
        stop = report["faster_stop"][pool]
        assert isinstance(stop["rule"], str) and isinstance(stop["safe_to_ship"], bool)
        assert set(stop["test"]) >= {"precision", "recall", "decided_at_ms"}

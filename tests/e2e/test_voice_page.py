"""The voice page in a real browser: Debian's chromium, headless, over the WebSocket and WebRTC,
against the served pipeline (real models). Its microphone is a WAV file of Piper speaking
(Chromium's own capture path), or, where speech must land while the answer sounds, a scripted
one the test speaks into when the page says the answer is playing (``scripted_microphone.js``)."""

import json
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from realtime_client import LONG_QUESTION
from voice_page import ANSWER_SOUNDING, PLAYED_OUT, STOP_WITHIN_MS, hang_up, open_page, say, seen, until, within

from handlers.audio import SPEECH_RATE, float_to_pcm16

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

ARTIFACTS = Path(__file__).parents[1] / "artifacts"


def microphone_file(path: Path, parts: list[np.ndarray]) -> Path:
    """What the fake microphone says (Chromium plays it once: ``%noloop``), at 16 kHz."""
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(SPEECH_RATE)
        wav.writeframes(float_to_pcm16(np.concatenate(parts)))
    return path


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SPEECH_RATE), np.float32)


TRANSPORTS = pytest.mark.parametrize("transport", ["websocket", "webrtc"])


@TRANSPORTS
async def test_the_page_hears_the_question_and_plays_the_answer(
    browser_with: Callable[[Path], Any],
    realtime_url: str,
    speak: Callable[..., np.ndarray],
    tmp_path: Path,
    transport: str,
) -> None:
    question = speak("What is the capital of France?", silence_s=0.5)
    browser = await browser_with(microphone_file(tmp_path / "mic.wav", [question, silence(30)]))
    page = await open_page(browser, realtime_url, transport)
    await page.wait_for_function("window.s2s.stats.responses >= 1 && window.s2s.stats.playedMs > 500", timeout=60_000)
    heard = await page.inner_text("li.user")
    assert "capital" in heard.lower() or "france" in heard.lower(), heard  # robust to a misheard word
    assert (await page.inner_text("li.assistant")).strip()
    stats = await page.evaluate("window.s2s.stats")
    assert stats["errors"] == [] and stats["playedMs"] > 500
    assert stats["timings"] and stats["timings"][0]["first_audio_ms"] > 0  # the server's, shown under the answer
    assert "voice-to-voice" in (await page.get_attribute("li.assistant", "data-timing") or "")
    if transport == "websocket":  # the page plays the deltas it received
        assert stats["receivedMs"] >= stats["playedMs"]
    assert await page.is_hidden("#error")
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"voice-page-{transport}.png"), full_page=True)
    await hang_up(page)


BARGE_IN_TRIES = 4
"""Each try speaks over the answer the moment it sounds. One that the VAD hears only after that
stretch of answer ended (on a loaded CI host a stretch was 0.75 s, a sentence's first words,
then 19-29 s of silence, 2026-12-02) is a turn of its own, and its answer is the next try."""


@TRANSPORTS
async def test_speech_during_the_answer_stops_playback_at_once(
    browser_with: Callable[[Path | None], Any], realtime_url: str, speak: Callable[..., np.ndarray], transport: str
) -> None:
    page = await open_page(await browser_with(None), realtime_url, transport, scripted_microphone=True)
    await say(page, speak(LONG_QUESTION, silence_s=0.5))
    barge_in = speak("Stop. Tell me a long story about a cat instead.", silence_s=0.5)
    for _ in range(BARGE_IN_TRIES):
        await until(page, ANSWER_SOUNDING[transport], 180, "no answer sounded")
        began, _ = await say(page, barge_in)
        await until(page, f"window.s2s.lastSpeechStartedAt > {began}", 30, "the barge-in was not heard")
        # Over WebRTC the stop is counted when the page stops hearing the answer (within 3 s).
        if await within(page, "window.s2s.stats.stops.length >= 1", 5):
            break
    else:
        raise AssertionError(f"no try spoke over a sounding answer: {await seen(page)}")
    await until(page, "window.s2s.stats.cancelled >= 1", 60, "the interrupted answer was not cancelled")
    stats = await page.evaluate("window.s2s.stats")
    print(json.dumps({"transport": transport, "browser_stop_after_speech_started_ms": round(stats["stops"][0])}))
    assert stats["stops"][0] <= STOP_WITHIN_MS, f"playback stopped {stats['stops'][0]:.0f} ms after"
    assert await page.locator("li.assistant.cut").count() >= 1, "the interrupted answer is marked so"
    assert stats["errors"] == []
    await hang_up(page)


BACKCHANNEL = "Yeah."
"""A word: tiny.en hears a hum as words too often for a test that must never flake. Piper's
"Mm hmm." was taken for an interruption in 10-13 of 18 renderings as the gate looks at its
words (a CI run failed so), and still in 5 of 18 after the hums prompt (docs/bench/README.md,
"Telling Whisper hums are likely"); the bench and the load harness measure hums instead."""
PLAYED_ON_MS = 1000
"""The answer sounded this long after the backchannel ended: it was playing over it and went on."""


@TRANSPORTS
async def test_a_backchannel_during_the_answer_leaves_its_playback_running(
    browser_with: Callable[[Path | None], Any], realtime_url: str, speak: Callable[..., np.ndarray], transport: str
) -> None:
    answer_over = (
        "!window.s2s.serverPlaying"  # the server says its playback ended (or was cleared)
        if transport == "webrtc"
        else PLAYED_OUT
    )
    cut = "window.s2s.stats.cancelled > 0 || window.s2s.stats.stops.length > 0"  # a cut never plays out
    new_turn = "document.querySelectorAll('li.user').length > 1"
    page = await open_page(await browser_with(None), realtime_url, transport, scripted_microphone=True)
    await say(page, speak(LONG_QUESTION, silence_s=0.5))
    await until(page, ANSWER_SOUNDING[transport], 180, "no answer sounded")
    _, backchannel_ends = await say(page, speak(BACKCHANNEL, silence_s=0.0))
    over = f"{cut} || {new_turn} || (window.s2s.stats.responses >= 1 && {answer_over})"
    await until(page, over, 120, "the answer neither ended nor was cut")
    stats = await page.evaluate("window.s2s.stats")
    played_on_ms = stats["lastSoundAt"] - backchannel_ends
    print(json.dumps({"transport": transport, "answer_played_on_after_the_backchannel_ms": round(played_on_ms)}))
    assert stats["cancelled"] == 0 and stats["stops"] == [], f"the backchannel cut the answer: {await seen(page)}"
    assert played_on_ms > PLAYED_ON_MS, f"the answer's last sound came {played_on_ms:.0f} ms after the backchannel"
    assert await page.locator("li.user").count() == 1, f"the backchannel is no turn: {await seen(page)}"
    assert stats["responses"] == 1 and stats["errors"] == []
    await hang_up(page)

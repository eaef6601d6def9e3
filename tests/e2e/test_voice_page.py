"""The voice page in a real browser: Debian's chromium, headless, its microphone a WAV file of
Piper speaking, over the WebSocket, against the served pipeline (real models)."""

import json
import shutil
import wave
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from playwright.async_api import Browser, Page, async_playwright
from realtime_client import LONG_QUESTION

from handlers.audio import SPEECH_RATE, float_to_pcm16

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


@pytest.fixture
async def browser_with(tmp_path: Path) -> AsyncIterator[Callable[[Path], Any]]:
    """A headless chromium whose microphone plays the given file."""
    executable = shutil.which("chromium")
    assert executable, "Debian's chromium is missing: make install-dev installs it"
    browsers: list[Browser] = []
    async with async_playwright() as playwright:

        async def launch(microphone: Path) -> Browser:
            browser = await playwright.chromium.launch(
                executable_path=executable,
                headless=True,
                args=[
                    "--use-fake-ui-for-media-stream",
                    "--use-fake-device-for-media-stream",
                    f"--use-file-for-fake-audio-capture={microphone}%noloop",
                    "--autoplay-policy=no-user-gesture-required",
                ],
            )
            browsers.append(browser)
            return browser

        yield launch
        for browser in browsers:
            await browser.close()


TRANSPORTS = pytest.mark.parametrize("transport", ["websocket", "webrtc"])
STOP_WITHIN_MS = 150
"""The issue's bound, over both transports. Over the WebSocket the page stops its own playback
(measured 0-3 ms); over WebRTC the server stops sending and the page mutes what is still on
the wire and in the browser's jitter buffer (unmuted, that played on for 900 ms here)."""


async def hang_up(page: Page) -> None:
    """Disconnect as a user would: the server ends the session now, not when the call times out."""
    await page.click("#connect")
    await page.wait_for_function("window.s2s.connected === false", timeout=10_000)


async def seen(page: Page) -> str:
    """What the page counted and shows: for a failure's message."""
    return str(
        await page.evaluate(
            "[window.s2s.stats, [...document.querySelectorAll('li')].map(e => e.className + ': ' + e.textContent)]"
        )
    )


async def open_page(browser: Browser, realtime_url: str, transport: str) -> Page:
    page = await browser.new_page(viewport={"width": 390, "height": 800})  # a phone's screen
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    base = realtime_url.replace("ws://", "http://").removesuffix("/v1")
    await page.goto(f"{base}/?transport={transport}")
    await page.click("#connect")
    await page.wait_for_function("window.s2s.connected === true", timeout=30_000)
    assert errors == []
    return page


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
    if transport == "websocket":  # the page plays the deltas it received
        assert stats["receivedMs"] >= stats["playedMs"]
    assert await page.is_hidden("#error")
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"voice-page-{transport}.png"), full_page=True)
    await hang_up(page)


@TRANSPORTS
async def test_speech_during_the_answer_stops_playback_at_once(
    browser_with: Callable[[Path], Any],
    realtime_url: str,
    speak: Callable[..., np.ndarray],
    tmp_path: Path,
    transport: str,
) -> None:
    first = speak(LONG_QUESTION, silence_s=0.5)
    barge_in = speak("Stop. What is two plus two?", silence_s=0.5)
    microphone = microphone_file(tmp_path / "mic.wav", [first, silence(8.0), barge_in, silence(30)])
    for attempt in range(2):
        page = await open_page(await browser_with(microphone), realtime_url, transport)
        try:
            await page.wait_for_function(
                "window.s2s.stats.stops.length >= 1 || window.s2s.stats.responses >= 2", timeout=90_000
            )
        except Exception:
            raise AssertionError(f"no playback was stopped: {await seen(page)}") from None
        stats = await page.evaluate("window.s2s.stats")
        if stats["stops"] or attempt == 1:
            break
        # The barge-in found nothing playing: on a loaded machine the first answer's audio had
        # all been played by then (it arrived slower than real time). That run says nothing
        # about the stop; the call is made again.
        await hang_up(page)
    assert stats["stops"], f"no playback was stopped twice: {stats}"
    await page.wait_for_function("window.s2s.stats.responses >= 2", timeout=60_000)
    stats = await page.evaluate("window.s2s.stats")
    print(json.dumps({"transport": transport, "browser_stop_after_speech_started_ms": round(stats["stops"][0])}))
    assert stats["stops"][0] <= STOP_WITHIN_MS, f"playback stopped {stats['stops'][0]:.0f} ms after"
    assert stats["cancelled"] >= 1, "the first answer was cut by the barge-in"
    assert await page.locator("li.assistant.cut").count() >= 1, "the interrupted answer is marked so"
    assert stats["errors"] == []
    await hang_up(page)


BACKCHANNEL = "Yeah."
"""A word: tiny.en hears a hum as words too often for a test that must never flake. Piper's
"Mm hmm." cut the answer in 2 of 18 renderings even with function words ignored (10 of 18
before: a CI run failed so), and over WebRTC after Opus and Chromium's voice processing
(docs/bench/README.md, "What STT makes of a hum"); the bench measures hums instead."""
PLAYED_ON_MS = 1000
"""The answer sounded this long after the backchannel ended: it was playing over it and went on."""


@TRANSPORTS
async def test_a_backchannel_during_the_answer_leaves_its_playback_running(
    browser_with: Callable[[Path], Any],
    realtime_url: str,
    speak: Callable[..., np.ndarray],
    tmp_path: Path,
    transport: str,
) -> None:
    question = speak(LONG_QUESTION, silence_s=0.5)
    gap = silence(6.0)
    backchannel = speak(BACKCHANNEL, silence_s=0.0)
    backchannel_ends_ms = 1000 * (len(question) + len(gap) + len(backchannel)) / SPEECH_RATE
    microphone = microphone_file(tmp_path / "mic.wav", [question, gap, backchannel, silence(60)])
    answer_over = (
        "!window.s2s.serverPlaying"  # the server says its playback ended (or was cleared)
        if transport == "webrtc"
        else "window.s2s.stats.playedMs >= window.s2s.stats.receivedMs - 1"  # every chunk played
    )
    cut = "window.s2s.stats.cancelled > 0 || window.s2s.stats.stops.length > 0"  # a cut never plays out
    new_turn = "document.querySelectorAll('li.user').length > 1"
    for attempt in range(2):
        page = await open_page(await browser_with(microphone), realtime_url, transport)
        try:
            await page.wait_for_function(
                f"{cut} || {new_turn} || (window.s2s.stats.responses >= 1 && {answer_over})", timeout=120_000
            )
        except Exception:
            raise AssertionError(f"the answer neither ended nor was cut: {await seen(page)}") from None
        stats = await page.evaluate("window.s2s.stats")
        started = await page.evaluate("window.s2s.microphoneAt")
        played_on_ms = stats["lastSoundAt"] - (started + backchannel_ends_ms)
        if played_on_ms > PLAYED_ON_MS or stats["cancelled"] or stats["stops"] or attempt == 1:
            break
        # The answer had ended before the backchannel was spoken (a short answer): that run
        # says nothing about it; the call is made again.
        await hang_up(page)
    print(json.dumps({"transport": transport, "answer_played_on_after_the_backchannel_ms": round(played_on_ms)}))
    assert stats["cancelled"] == 0 and stats["stops"] == [], f"the backchannel cut the answer: {await seen(page)}"
    assert played_on_ms > PLAYED_ON_MS, f"the answer's last sound came {played_on_ms:.0f} ms after the backchannel"
    assert await page.locator("li.user").count() == 1, f"the backchannel is no turn: {await seen(page)}"
    assert stats["responses"] == 1 and stats["errors"] == []
    await hang_up(page)

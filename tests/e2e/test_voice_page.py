"""The voice page in a real browser: Debian's chromium, headless, over the WebSocket and WebRTC,
against the served pipeline (real models). Its microphone is a WAV file of Piper speaking
(Chromium's own capture path), or, where speech must land while the answer sounds, a scripted
one the test speaks into when the page says the answer is playing (``scripted_microphone.js``)."""

import base64
import json
import shutil
import wave
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from playwright.async_api import Browser, Page, async_playwright
from playwright.async_api import TimeoutError as PlaywrightTimeoutError
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


BROWSER_NICENESS = 19
"""The browser runs at the lowest CPU priority. A user's browser runs on the user's device; here
it shares the server's two cores, and at normal priority it took up to 0.4 core from the
models: on a slow machine an answer then came slower than real time, with silences of up to
18 s between its sentences (measured 2026-12-02), and no barge-in or backchannel could be
timed to land on it."""


@pytest.fixture
async def browser_with(tmp_path: Path) -> AsyncIterator[Callable[[Path | None], Any]]:
    """A headless chromium whose microphone plays the given file (none: Chromium's fake
    device, for pages that script their microphone)."""
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: make install-dev installs it"
    executable = tmp_path / "chromium-niced"
    executable.write_text(f'#!/bin/sh\nexec nice -n {BROWSER_NICENESS} {chromium} "$@"\n')
    executable.chmod(0o755)
    browsers: list[Browser] = []
    async with async_playwright() as playwright:

        async def launch(microphone: Path | None) -> Browser:
            played = [f"--use-file-for-fake-audio-capture={microphone}%noloop"] if microphone else []
            browser = await playwright.chromium.launch(
                executable_path=executable,
                headless=True,
                args=[
                    "--use-fake-ui-for-media-stream",
                    "--use-fake-device-for-media-stream",
                    *played,
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


async def open_page(browser: Browser, realtime_url: str, transport: str, scripted_microphone: bool = False) -> Page:
    page = await browser.new_page(viewport={"width": 390, "height": 800})  # a phone's screen
    if scripted_microphone:
        await page.add_init_script(path=SCRIPTED_MICROPHONE)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    base = realtime_url.replace("ws://", "http://").removesuffix("/v1")
    await page.goto(f"{base}/?transport={transport}")
    await page.click("#connect")
    await page.wait_for_function("window.s2s.connected === true", timeout=30_000)
    assert errors == []
    return page


SCRIPTED_MICROPHONE = Path(__file__).with_name("scripted_microphone.js")
ANSWER_SOUNDING = {
    # The page plays the deltas: the answer sounds now, and more of it is due: at least 1 s
    # in hand, or (paced: the page never holds more than the lead) its response.done not come.
    "websocket": "(() => { const stats = window.s2s.stats, s = stats.sounding.at(-1), now = performance.now();"
    " return !!s && s[0] <= now && now < s[1] && (s[1] - now > 1000 || stats.created > stats.responses); })()",
    # The server plays: its track sounds now.
    "webrtc": "window.s2s.serverPlaying && performance.now() - window.s2s.stats.lastSoundAt < 100",
}
"""When to speak over the answer: an event, not a time, however slow the machine."""


async def say(page: Page, samples: np.ndarray) -> tuple[float, float]:
    """Speak into the page's scripted microphone now: when the clip begins and ends (page ms)."""
    pcm = base64.b64encode(float_to_pcm16(samples)).decode()
    began = await page.evaluate("([pcm, rate]) => window.scriptedMicrophone.say(pcm, rate)", [pcm, SPEECH_RATE])
    return began, began + 1000 * len(samples) / SPEECH_RATE


async def within(page: Page, condition: str, timeout_s: float) -> bool:
    """Whether the page's ``condition`` came true within the time."""
    try:
        await page.wait_for_function(condition, timeout=timeout_s * 1000)
    except PlaywrightTimeoutError:
        return False
    return True


async def until(page: Page, condition: str, timeout_s: float, failure: str) -> None:
    if not await within(page, condition, timeout_s):
        raise AssertionError(f"{failure}: {await seen(page)}")


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
        else "window.s2s.stats.playedMs >= window.s2s.stats.receivedMs - 1"  # every chunk played
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

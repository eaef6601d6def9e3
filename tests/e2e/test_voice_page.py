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


BROWSER_NICENESS = 19
"""The browser runs at the lowest CPU priority. A user's browser runs on the user's device; here
it shares the server's two cores, and at normal priority it took up to 0.4 core from the
models: on a slow machine an answer then came slower than real time, with silences of up to
18 s between its sentences (measured 2026-12-02), and no barge-in or backchannel could be
timed to land on it."""


@pytest.fixture
async def browser_with(tmp_path: Path) -> AsyncIterator[Callable[[Path], Any]]:
    """A headless chromium whose microphone plays the given file."""
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: make install-dev installs it"
    executable = tmp_path / "chromium-niced"
    executable.write_text(f'#!/bin/sh\nexec nice -n {BROWSER_NICENESS} {chromium} "$@"\n')
    executable.chmod(0o755)
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


def later_gap_s(stats: dict[str, Any], started: float, question: np.ndarray, gap_s: float, into_s: float) -> float:
    """For a run whose speech (``gap_s`` after ``question`` in the microphone file) did not
    land on the answer: the gap that puts it ``into_s`` into the answer's first sound before
    that speech, as this run heard it; else one twice as long (the answer had not begun to
    sound: a slow machine)."""
    question_ends = started + 1000 * len(question) / SPEECH_RATE
    speech_at = question_ends + 1000 * gap_s
    for start, _ in stats["sounding"]:
        if question_ends <= start < speech_at:
            return (start - question_ends) / 1000 + into_s
    return 2 * gap_s


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


BARGE_IN_GAPS_S = (6.0, 4.0, 8.0, 5.0, 10.0, 7.0, 12.0)
"""The microphone speaks over the answer again and again, after these silences: one of them
lands while an answer sounds, however slow the machine. A barge-in at a fixed time did not: on
a loaded CI host the first answer sounded 0.75 s, then was silent 29 s (the LLM's next
sentence), and a second call timed from the first met the same silence (2026-12-02). A
barge-in that finds nothing sounding is a turn of its own; its answer is the next chance."""


@TRANSPORTS
async def test_speech_during_the_answer_stops_playback_at_once(
    browser_with: Callable[[Path], Any],
    realtime_url: str,
    speak: Callable[..., np.ndarray],
    tmp_path: Path,
    transport: str,
) -> None:
    barge_in = speak("Stop. Tell me a long story about a cat instead.", silence_s=0.5)
    said = [speak(LONG_QUESTION, silence_s=0.5)]
    for gap_s in BARGE_IN_GAPS_S:
        said += [silence(gap_s), barge_in]
    page = await open_page(
        await browser_with(microphone_file(tmp_path / "mic.wav", [*said, silence(30)])), realtime_url, transport
    )
    try:
        await page.wait_for_function(
            "window.s2s.stats.stops.length >= 1 && window.s2s.stats.cancelled >= 1", timeout=180_000
        )
    except Exception:
        raise AssertionError(f"no playback was stopped: {await seen(page)}") from None
    stats = await page.evaluate("window.s2s.stats")
    print(json.dumps({"transport": transport, "browser_stop_after_speech_started_ms": round(stats["stops"][0])}))
    assert stats["stops"][0] <= STOP_WITHIN_MS, f"playback stopped {stats['stops'][0]:.0f} ms after"
    assert await page.locator("li.assistant.cut").count() >= 1, "the interrupted answer is marked so"
    assert stats["errors"] == []
    await hang_up(page)


BACKCHANNEL = "Yeah."
"""A word: tiny.en hears a hum as words too often for a test that must never flake. Piper's
"Mm hmm." is taken for an interruption in 10-11 of 18 renderings as the gate looks at its
words (a CI run failed so), and over WebRTC after Opus and Chromium's voice processing
(docs/bench/README.md, "When the words are looked at"); the bench measures hums instead."""
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
    backchannel = speak(BACKCHANNEL, silence_s=0.0)
    answer_over = (
        "!window.s2s.serverPlaying"  # the server says its playback ended (or was cleared)
        if transport == "webrtc"
        else "window.s2s.stats.playedMs >= window.s2s.stats.receivedMs - 1"  # every chunk played
    )
    cut = "window.s2s.stats.cancelled > 0 || window.s2s.stats.stops.length > 0"  # a cut never plays out
    new_turn = "document.querySelectorAll('li.user').length > 1"
    gap_s = 6.0
    for attempt in range(2):
        said = [question, silence(gap_s), backchannel, silence(60)]
        page = await open_page(
            await browser_with(microphone_file(tmp_path / f"mic{attempt}.wav", said)), realtime_url, transport
        )
        try:
            await page.wait_for_function(
                f"{cut} || {new_turn} || (window.s2s.stats.responses >= 1 && {answer_over})", timeout=120_000
            )
        except Exception:
            raise AssertionError(f"the answer neither ended nor was cut: {await seen(page)}") from None
        stats = await page.evaluate("window.s2s.stats")
        started = await page.evaluate("window.s2s.microphoneAt")
        backchannel_starts = started + 1000 * (len(question) / SPEECH_RATE + gap_s)
        # The answer is on from its first sound to its response.done or its last sound, the
        # later: a silence between its sentences (a loaded machine) is part of it, as the
        # server's listener clock has it (deployments/realtime/playback.py).
        answer_ends = max([stats["lastSoundAt"], *stats["doneAt"][:1]])
        during = bool(stats["sounding"]) and stats["sounding"][0][0] < backchannel_starts < answer_ends
        played_on_ms = stats["lastSoundAt"] - (backchannel_starts + 1000 * len(backchannel) / SPEECH_RATE)
        if during or attempt == 1:
            break
        # The backchannel came before the answer sounded (a loaded machine) or after it ended
        # (a short answer). Speech then is a turn, as it should be, so that run says nothing;
        # the call is made again, the backchannel put 1 s into the answer as this run timed it.
        gap_s = later_gap_s(stats, started, question, gap_s, into_s=1.0)
        await hang_up(page)
    assert during, f"the backchannel twice came outside the answer: {await seen(page)}"
    print(json.dumps({"transport": transport, "answer_played_on_after_the_backchannel_ms": round(played_on_ms)}))
    assert stats["cancelled"] == 0 and stats["stops"] == [], f"the backchannel cut the answer: {await seen(page)}"
    assert played_on_ms > PLAYED_ON_MS, f"the answer's last sound came {played_on_ms:.0f} ms after the backchannel"
    assert await page.locator("li.user").count() == 1, f"the backchannel is no turn: {await seen(page)}"
    assert stats["responses"] == 1 and stats["errors"] == []
    await hang_up(page)

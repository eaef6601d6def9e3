"""Driving the voice page in a real browser (Debian's chromium, headless): open it, speak
into its scripted microphone (``scripted_microphone.js``) when an event says so, and read
what it counted (``window.s2s``). Shared by the page's tests on the real models and on the
synthetic engines."""

import base64
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
from playwright.async_api import Browser, Page, async_playwright
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from handlers.audio import SPEECH_RATE, float_to_pcm16

BROWSER_NICENESS = 19
"""The browser runs at the lowest CPU priority. A user's browser runs on the user's device; here
it shares the server's two cores, and at normal priority it took up to 0.4 core from the
models: on a slow machine an answer then came slower than real time, with silences of up to
18 s between its sentences (measured 2026-12-02), and no barge-in or backchannel could be
timed to land on it."""


@asynccontextmanager
async def browsers(workdir: Path) -> AsyncIterator[Callable[[Path | None], Any]]:
    """Launches headless chromiums whose microphone plays the given file (none: Chromium's fake
    device, for pages that script their microphone); closes them all at the end."""
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is missing: make install-dev installs it"
    executable = workdir / "chromium-niced"
    executable.write_text(f'#!/bin/sh\nexec nice -n {BROWSER_NICENESS} {chromium} "$@"\n')
    executable.chmod(0o755)
    launched: list[Browser] = []
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
            launched.append(browser)
            return browser

        yield launch
        for browser in launched:
            await browser.close()


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


async def open_page(
    browser: Browser,
    realtime_url: str,
    transport: str,
    scripted_microphone: bool = False,
    key: str = "",
    watch: str | None = None,
) -> Page:
    """``key``: what the user types in the page's key field (a client secret, or the API
    key); ``watch``: a script run before the page's own."""
    page = await browser.new_page(viewport={"width": 390, "height": 800})  # a phone's screen
    if scripted_microphone:
        await page.add_init_script(path=SCRIPTED_MICROPHONE)
    if watch is not None:
        await page.add_init_script(script=watch)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # What a user would see in the browser's console, a missing favicon's 404 included.
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    base = realtime_url.replace("ws://", "http://").removesuffix("/v1")
    await page.goto(f"{base}/?transport={transport}")
    await page.fill("#key", key)
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
PLAYED_OUT = "window.s2s.stats.playedMs >= window.s2s.stats.receivedMs - 1"
"""Over the WebSocket: every chunk of answer audio the page received has played."""


def spoken(tone: np.ndarray) -> np.ndarray:
    """A tone said into the microphone, then the quiet that ends its turn."""
    return np.concatenate([tone, np.zeros(SPEECH_RATE, np.float32)])


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

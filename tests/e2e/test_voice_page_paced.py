"""The voice page as users get it by default: over the WebSocket the server sends an answer's
audio at most ``audio_lead_ms`` ahead of what the page has played, so speech over the answer
silences it at the speech's onset (the server stops sending) and a hum costs only a short gap.

The app here runs the synthetic engines beside the real one (questions, answers and the hum
are tones, read back exactly; ``synthetic_app.py``), at a route prefix of its own: the
page must find its API there. The real models' page tests send answers as made
(``conftest.realtime_url``), or the suite would wait for every answer in real time."""

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ray import serve
from synthetic_app import serve_synthetic
from voice_page import ANSWER_SOUNDING, PLAYED_OUT, STOP_WITHIN_MS, hang_up, open_page, say, seen, spoken, until

from deployments.realtime.turn_taking.config import InterruptionRules
from handlers.synthetic import backchannel_tone, question_tone

pytestmark = pytest.mark.serve
"""Ray and Serve with the synthetic engines, no model: part of ``make test-serve``."""

PAGE_APP = "voice-page-paced"
LEAD_MS = InterruptionRules().audio_lead_ms
HELD_AT_MOST_MS = 600
"""The most answer audio the page may hold unplayed: the lead (200 ms), the page's jitter
margin (80 ms), one 100 ms delta and slack for timers. Sent as made, it holds the answer's
seconds (the synthetic answer is made in under one)."""
PLAYED_ON_MS = 1000


@pytest.fixture(scope="module")
def paced_url(serve_port: int) -> Iterator[str]:
    """Answers of 48 words (14 s of tone), so there is time to speak over one."""
    synthetic = {"answer_words": 48, "tokens_per_s": 40, "speech_s_per_word": 0.3}
    assert LEAD_MS is not None, "pacing is the server's default"
    yield f"{serve_synthetic(serve_port, PAGE_APP, synthetic)}/v1"
    serve.delete(PAGE_APP)


async def paced_page(browser_with: Callable[[Path | None], Any], paced_url: str) -> Any:
    page = await open_page(await browser_with(None), paced_url, "websocket", scripted_microphone=True)
    # The page found the API under its own prefix, not the real app's at the root.
    assert "synthetic" in await page.inner_text("#status")
    await say(page, spoken(question_tone(7, 1.2)))
    await until(page, ANSWER_SOUNDING["websocket"], 60, "no answer sounded")
    return page


async def test_speech_over_a_paced_answer_has_silenced_it_by_its_confirmation(
    browser_with: Callable[[Path | None], Any], paced_url: str
) -> None:
    page = await paced_page(browser_with, paced_url)
    began, _ = await say(page, spoken(question_tone(9, 1.2)))
    await until(page, f"window.s2s.lastSpeechStartedAt > {began}", 30, "the barge-in was not heard")
    await until(page, "window.s2s.stats.cancelled >= 1", 30, "the interrupted answer was not cancelled")
    stats = await page.evaluate("window.s2s.stats")
    speech_started = await page.evaluate("window.s2s.lastSpeechStartedAt")
    stop = stats["stops"][0]  # the answer's last sound against speech_started
    print(
        json.dumps(
            {
                "browser_stop_after_speech_started_ms": round(stop),
                "onset_to_last_sound_ms": round(speech_started + stop - began),
                "onset_to_response_done_ms": round(stats["doneAt"][0] - began),  # the cancelled one
                "most_held_ms": round(stats["mostAheadMs"]),
            }
        )
    )
    assert stats["stops"][0] <= STOP_WITHIN_MS, f"the answer sounded {stats['stops'][0]:.0f} ms after speech_started"
    assert stats["mostAheadMs"] <= HELD_AT_MOST_MS, f"the page held {stats['mostAheadMs']:.0f} ms: not paced"
    assert await page.locator("li.assistant.cut").count() == 1, "the interrupted answer is marked so"
    assert stats["errors"] == []
    await hang_up(page)


async def test_a_hum_over_a_paced_answer_costs_a_gap_and_the_answer_plays_on(
    browser_with: Callable[[Path | None], Any], paced_url: str
) -> None:
    page = await paced_page(browser_with, paced_url)
    _, hum_ends = await say(page, backchannel_tone(0.6))
    await until(page, f"window.s2s.stats.responses >= 1 && {PLAYED_OUT}", 60, "the answer never played out")
    stats = await page.evaluate("window.s2s.stats")
    played_on_ms = stats["lastSoundAt"] - hum_ends
    print(
        json.dumps(
            {"answer_played_on_after_the_hum_ms": round(played_on_ms), "most_held_ms": round(stats["mostAheadMs"])}
        )
    )
    assert stats["cancelled"] == 0 and stats["stops"] == [], f"the hum cut the answer: {await seen(page)}"
    assert played_on_ms > PLAYED_ON_MS, f"the answer's last sound came {played_on_ms:.0f} ms after the hum"
    assert stats["mostAheadMs"] <= HELD_AT_MOST_MS, f"the page held {stats['mostAheadMs']:.0f} ms: not paced"
    assert await page.locator("li.user").count() == 1, f"the hum is no turn: {await seen(page)}"
    assert stats["responses"] == 1 and stats["errors"] == []
    await hang_up(page)

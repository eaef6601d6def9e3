"""The load test's paused questions: each is said in two halves, the pause between words."""

import numpy as np
import pytest

from handlers.audio import REALTIME_RATE
from loadtest.client.prompts import LAST_WORD_S, PAUSE_S, spoken_prompts, tone_prompts

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""


def halves_ms(pcm16: bytes) -> tuple[float, float]:
    """Milliseconds of audio before and after the longest run of exact silence (the pause)."""
    silent = np.frombuffer(pcm16, "<i2") == 0
    edges = np.flatnonzero(np.diff(np.concatenate([[0], silent.astype(np.int8), [0]])))
    starts, ends = edges[::2], edges[1::2]
    longest = int(np.argmax(ends - starts))
    return 1000 * starts[longest] / REALTIME_RATE, 1000 * (len(silent) - ends[longest]) / REALTIME_RATE


def test_every_paused_question_goes_on_after_its_pause() -> None:
    """Spoken by Piper: the pause falls between words, with the last word after it (it once
    fell after "Italy", which left the question no second half)."""
    for prompts in (spoken_prompts(), tone_prompts()):
        for whole, paused in zip(prompts.prompts, prompts.paused, strict=True):
            before, after = halves_ms(paused.pcm16)
            assert paused.text == whole.text
            assert len(paused.pcm16) == len(whole.pcm16) + 2 * int(PAUSE_S * REALTIME_RATE)
            assert before > 300 and after >= 1000 * LAST_WORD_S, (paused.text, before, after)
            assert paused.resumes_at_s is not None  # where the session tells a stop at the pause
            assert abs(1000 * paused.resumes_at_s - (before + 1000 * PAUSE_S)) < 25, (paused.text, before)

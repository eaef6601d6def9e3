from collections.abc import Callable

import numpy as np
import pytest

from handlers.speakable import speakable
from handlers.stt import SpeechToText

pytestmark = pytest.mark.models
"""Piper and tiny.en: what ``speakable`` spells out is what is heard."""


@pytest.mark.parametrize(
    ("text", "heard", "not_heard"),
    [
        ("It is 25°C.", ["celsius"], []),
        ("It is about 5 km away.", ["kilometers"], []),  # tiny.en writes "5 km" for it after "25°C,"
        ("The **capital** of France 😀", ["capital", "france"], ["asterisk", "face"]),
        ("Visit https://www.example.com/path?x=1 today.", ["example"], ["slash", "http"]),
    ],
)
def test_what_piper_says_is_heard(
    speak: Callable[..., np.ndarray], stt: SpeechToText, text: str, heard: list[str], not_heard: list[str]
) -> None:
    transcript = stt.transcribe(speak(speakable(text))).lower()
    assert all(word in transcript for word in heard), transcript
    assert not any(word in transcript for word in not_heard), transcript

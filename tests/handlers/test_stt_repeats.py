"""What a turn's transcript keeps when tiny.en says the utterance again in its short window
(``SpeechToText._said_once``); the real model's repeats are in ``test_pipeline.py``."""

import pytest

from handlers.stt import SpeechToText

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    ("decoded", "kept"),
    [
        ("What is the capital of France? What is the capital of France?", "What is the capital of France?"),
        ("What color is the sky? What color is the sky? What color", "What color is the sky?"),
        ("What is the capital of Germany? What is the capital of g", "What is the capital of Germany?"),
        ("Wait, stop... Wait, stop... Wait, stop...", "Wait, stop..."),
    ],
)
def test_what_is_said_again_is_dropped(decoded: str, kept: str) -> None:
    assert SpeechToText._said_once(decoded) == (kept, True)


@pytest.mark.parametrize(
    "decoded",
    [
        "What is the capital of France? What is the capital of Spain?",
        "I think so. I think so too, and then some.",
        "My phone number is 555-1234.",
        "No, no, no.",
    ],
)
def test_sentences_that_only_begin_alike_are_kept(decoded: str) -> None:
    assert SpeechToText._said_once(decoded) == (decoded, False)

"""How the benchmarks judge an answer's text, as a listener would: whether it says an
accepted answer in whole words, whether it is English, and text normalised for word error
rates ("8" and "eight" alike). Shared by ``s2s-bench quality`` and ``s2s-bench stt-decode``."""

import re

import jiwer
from num2words import num2words

_WORDS = re.compile(r"[a-z0-9']+")


def words_of(text: str) -> list[str]:
    return _WORDS.findall(text.lower().replace("-", " "))


def is_right(text: str, accept: tuple[str, ...]) -> bool:
    """Whether any accepted word (or phrase) stands in ``text`` as whole words."""
    said = " " + " ".join(words_of(text)) + " "
    return any(f" {' '.join(words_of(word))} " in said for word in accept)


LANGUAGES = (
    "ENGLISH",
    "FRENCH",
    "GERMAN",
    "SPANISH",
    "ITALIAN",
    "PORTUGUESE",
    "DUTCH",
    "RUSSIAN",
    "CHINESE",
    "JAPANESE",
)
"""What an answer's language is told among: English and the languages a small model drifts
into. Among all 75 lingua knows, short English sentences lose to Tsonga and Somali."""
OTHER_LANGUAGE_MARGIN = 0.1
"""An answer is in another language when that one is more likely than English by this much:
"A spider has 8 legs." is German 0.30 / English 0.29, "Il capo di Italy, il capital di
Roma..." Italian 0.38 / English 0.22."""


_LETTERS = re.compile(r"[^\W\d_]+")


class EnglishCheck:
    """Whether a text is in English (lingua, among :data:`LANGUAGES`); ``None`` for fewer than
    three words ("Rome.", "Six + 1 = 7."), which are no language of their own."""

    def __init__(self) -> None:
        from lingua import Language, LanguageDetectorBuilder

        self._detector = LanguageDetectorBuilder.from_languages(*(getattr(Language, n) for n in LANGUAGES)).build()

    def __call__(self, text: str) -> bool | None:
        words = _LETTERS.findall(text)  # "10 minus 3 is 2." is not Dutch: numbers and signs say nothing
        if len(words) < 3:
            return None
        likely = {c.language.name: c.value for c in self._detector.compute_language_confidence_values(" ".join(words))}
        return max(likely.values()) - likely["ENGLISH"] < OTHER_LANGUAGE_MARGIN


_WER_TEXT = jiwer.Compose(
    [jiwer.ExpandCommonEnglishContractions(), jiwer.RemovePunctuation(), jiwer.RemoveMultipleSpaces(), jiwer.Strip()]
)


def normalise(text: str) -> str:
    """``text`` as word error rates compare it: "8" and "eight", "what's" and "what is" alike."""
    spelled = re.sub(r"\d+", lambda digits: f" {num2words(int(digits[0]))} ", text.lower().replace("-", " "))
    return str(_WER_TEXT(spelled.replace("-", " ").replace(",", "")))

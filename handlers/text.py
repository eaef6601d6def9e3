"""The answer's text on its way to speech: where the LLM stops, and how its deltas are cut
into TTS-sized pieces.

:class:`SentenceBound` ends an answer at its first sentence end past a number of tokens, so a
spoken answer stays short and never stops mid-sentence. :class:`SpeechChunker` cuts the first
piece early -- at the first clause boundary once it has a few words, or after
``first_chunk_max_words`` words at a word boundary -- so speech can start while the model is
still writing; later pieces are whole sentences, which synthesise with better prosody, unless
the audio ready to play runs low: then a clause, or the words so far, go before the sentence
ends, so a listener never waits in the middle of an answer.
"""

import itertools
import re
from collections.abc import Iterator

FIRST_CHUNK_MAX_WORDS = 3
"""Measured on the served app here (make bench-e2e, 20 turns): with 3 words p50
voice-to-voice was 1.13 s, with 5 words 1.57 s."""

LOW_LEAD_MS = 800.0
"""Audio ready to play below which the next piece goes before its sentence ends: more than
a piece takes to synthesise here (Piper's first chunk 94-168 ms, more under load)."""
LOW_LEAD_MIN_WORDS = 3
"""The fewest words a piece cut for a low lead has: shorter pieces sound clipped."""

_SENTENCE_END = re.compile(r"[.!?…]+[\"')\]]*\s")
_SENTENCE_END_SO_FAR = re.compile(r"[.!?…]+[\"')\]]*$")
_CLAUSE_END = re.compile(r"[,;:—]\s")
_WORD_END = re.compile(r"\S+\s")
_DIGIT = re.compile(r"\d")


class SentenceBound:
    """Past ``tokens`` tokens, the answer ends with its next sentence: a voice answer stays
    short, and ends where a sentence does rather than wherever a token cap falls."""

    def __init__(self, tokens: int) -> None:
        self._tokens = tokens
        self._spent = 0
        self._held = ""
        """Punctuation that may end a sentence, held until the next delta says (``3.`` may
        go on as ``3.5``)."""

    def feed(self, delta: str, tokens: int, last: bool = False) -> tuple[str, bool]:
        """The part of ``delta`` (of ``tokens`` tokens) to pass on, and whether the answer
        ends with it; ``last``: the model ended the answer with this delta."""
        over = self._spent >= self._tokens
        self._spent += tokens
        text, self._held = self._held + delta, ""
        if last or not over:
            return text, last
        if match := _SENTENCE_END.search(text):
            return text[: match.end()].rstrip(), True
        if match := _SENTENCE_END_SO_FAR.search(text):
            self._held = text[match.start() :]
            return text[: match.start()], False
        return text, False


class SpeechChunker:
    """Accumulates deltas and releases speakable chunks as soon as they are complete."""

    def __init__(
        self,
        first_chunk_min_words: int = 3,
        first_chunk_max_words: int = FIRST_CHUNK_MAX_WORDS,
        max_chars: int = 300,
        low_lead_ms: float | None = LOW_LEAD_MS,
    ) -> None:
        """``low_lead_ms``: ``None`` keeps later pieces whole sentences whatever the lead."""
        self._buffer = ""
        self._first = True
        self._first_chunk_min_words = first_chunk_min_words
        self._first_chunk_max_words = first_chunk_max_words
        self._max_chars = max_chars
        self._low_lead_ms = low_lead_ms

    def feed(self, delta: str, lead_ms: float = float("inf")) -> Iterator[str]:
        """Add a delta; yield every chunk it completes. ``lead_ms``: the answer's audio ready
        to play and not yet heard."""
        self._buffer += delta
        low = self._low_lead_ms is not None and lead_ms < self._low_lead_ms
        while (cut := self._next_cut(low)) is not None:
            chunk, self._buffer = self._buffer[:cut].strip(), self._buffer[cut:]
            if chunk:
                self._first = False
                yield chunk

    def flush(self, cut_short: bool = False) -> Iterator[str]:
        """End of the response: release whatever is left; ``cut_short`` (the model stopped at
        its token cap): only whole sentences, an unfinished one is not spoken."""
        chunk, self._buffer = self._buffer, ""
        if cut_short:
            ends = list(_SENTENCE_END.finditer(chunk + " "))
            chunk = chunk[: ends[-1].end()] if ends else ""
        if chunk := chunk.strip():
            yield chunk

    def _next_cut(self, low_lead: bool) -> int | None:
        """The earliest cut any rule allows, so the pieces do not depend on how the text
        was split into deltas."""
        cuts = []
        if match := _SENTENCE_END.search(self._buffer):
            cuts.append(match.end())
        if self._first or low_lead:
            least = self._first_chunk_min_words if self._first else LOW_LEAD_MIN_WORDS
            clauses = (
                match.end()
                for match in _CLAUSE_END.finditer(self._buffer)
                if len(self._buffer[: match.start()].split()) >= least
            )
            if (clause := next(clauses, None)) is not None:
                cuts.append(clause)
        if self._first:
            # A word is complete once whitespace follows it.
            words = list(itertools.islice(_WORD_END.finditer(self._buffer), self._first_chunk_max_words))
            if len(words) == self._first_chunk_max_words:
                cuts.append(words[-1].end())
        elif low_lead:
            # Never after a number: its unit ("5 | km") would be read alone, as letters.
            words = list(_WORD_END.finditer(self._buffer))
            ends = [w.end() for i, w in enumerate(words, 1) if i >= LOW_LEAD_MIN_WORDS and not _DIGIT.search(w[0])]
            if ends:
                cuts.append(ends[-1])
        if len(self._buffer) > self._max_chars:
            space = self._buffer.rfind(" ", 0, self._max_chars)
            cuts.append(space + 1 if space > 0 else self._max_chars)
        return min(cuts, default=None)

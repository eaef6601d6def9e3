"""What a transcript says of the sound it came from: speech, or only sounds and acknowledgements.

Whisper writes a cough as ``(coughing)`` and a hum as "Hmm." or "in"; turn-taking must not
take those for questions. Two tests read the same word lists: whether a transcript holds
speech at all (:func:`holds_speech`: else the turn gets no response) and whether it asks
for the floor over an answer (:func:`holds_a_real_word`: else it does not interrupt).
"""

import re

BACKCHANNEL_WORDS = frozenset(
    {
        *("yeah", "yes", "yep", "yup", "ya", "right", "okay", "ok", "sure", "alright", "true", "exactly"),
        *("i", "see", "got", "it", "cool", "nice", "great", "wow", "indeed", "thank", "thanks", "you"),
    }
)
"""Words that acknowledge an answer without asking for the floor (our own list: none of
the peers ships one). ``you`` and ``thank you`` are also what Whisper makes of noise."""
FUNCTION_WORDS = frozenset(
    {"a", "an", "the", "in", "on", "at", "of", "to", "and", "or", "for", "with", "by", "from", "as"}
)
"""Articles, prepositions and conjunctions: alone they ask for nothing. They are also what
tiny.en makes of a hum: Piper's "Mm-hmm." came out as "in", "in a", "and h m" (bench in
docs/bench/notes/backchannels.md, "What STT makes of a hum")."""
_SOUND = re.compile(r"[mhn]+|u+h*|a+h*|o+h*|h?u+h|u+m+|e+r*m*|a?(?:ha)+h?|(?:he)+h?|[b-hj-z]")
"""Hums, fillers and laughs as STT spells them, hyphens split: "mm-hmm", "uh-huh", "M-H-M",
"erm", "M N N", "aha", "hahah", "heh"; and any single letter but "i" and "a" (a spelled-out
hum). Piper's "Ha ha." came out as "Aha" (``s2s-bench interruption-table``'s laughs)."""
_NOT_WORDS = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*")
"""What STT writes for sounds: ``[coughs]``, ``(laughing)``, ``*knock*``."""
_WORD = re.compile(r"[a-z']+")
_SPOKEN = re.compile(r"[a-z0-9']+")
"""Words and numbers as STT writes them ("42", "2.5")."""


def holds_a_real_word(transcript: str) -> bool:
    """Whether ``transcript`` asks for the floor: a word beyond backchannels, function
    words and sounds."""
    words = _WORD.findall(_NOT_WORDS.sub(" ", transcript.lower()))
    return any(
        word not in BACKCHANNEL_WORDS and word not in FUNCTION_WORDS and not _SOUND.fullmatch(word) for word in words
    )


def holds_speech(transcript: str) -> bool:
    """Whether ``transcript`` holds a word or number that is not a sound: "Yes.", "Okay." and
    "42." do (they answer a question), "(coughing)", "Hmm." and "Ha ha." do not."""
    words = _SPOKEN.findall(_NOT_WORDS.sub(" ", transcript.lower()))
    return any(not _SOUND.fullmatch(word) for word in words)

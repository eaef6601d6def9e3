"""Stage failures in the client's words: which stage failed or did not answer in time.

Apart from ``stages.py`` (which holds the Serve adapter) so that the conversation and its
items, which raise and report these, import no Ray.
"""

from typing import Literal

StageName = Literal["vad", "turn_end", "stt", "llm", "tts"]
_STAGE_WORDS: dict[StageName, str] = {
    "vad": "voice activity detection",
    "turn_end": "end-of-turn detection",
    "stt": "speech recognition",
    "llm": "the language model",
    "tts": "speech synthesis",
}


class StageFailure(Exception):
    """A stage failed or did not answer in time: ``code`` and ``message`` are for the client
    (never a replica's internals: those go to the log, as the ``__cause__``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message

    @classmethod
    def timed_out(cls, stage: StageName, timeout_s: float) -> "StageFailure":
        return cls(f"{stage}_timeout", f"{_STAGE_WORDS[stage]} did not answer within {timeout_s:g} s")

    @classmethod
    def failed(cls, stage: StageName) -> "StageFailure":
        return cls(f"{stage}_failed", f"{_STAGE_WORDS[stage]} failed")

    @classmethod
    def unavailable(cls, stage: StageName) -> "StageFailure":
        return cls(
            f"{stage}_unavailable",
            f"{_STAGE_WORDS[stage]} has no running replica: it is being replaced (GET /readyz says when it is back)",
        )

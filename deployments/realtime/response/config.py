"""What the response side takes from the server's config, and from the LLM's context size."""

from dataclasses import dataclass

from deployments.realtime.session_config import SessionConfig


@dataclass(frozen=True)
class ResponseSettings:
    """How a session's answers are cut, sized and bounded."""

    first_chunk_words: int
    audio_delta_ms: int
    low_lead_ms: float | None
    """Audio ready to play below which a spoken answer's next piece goes before its sentence
    ends (``None``: whole sentences)."""
    answer_tokens: int | None
    """Past this many tokens an answer whose client set no ``max_output_tokens`` ends with its
    sentence (``None``: the model's cap alone)."""
    prompt_budget_tokens: int | None
    """The LLM's context less its answer's tokens (``None``: no limit to keep to)."""

    @classmethod
    def from_config(cls, config: SessionConfig, prompt_budget_tokens: int | None) -> "ResponseSettings":
        return cls(
            config.first_chunk_words,
            config.audio_delta_ms,
            config.low_lead_ms,
            config.answer_tokens,
            prompt_budget_tokens,
        )

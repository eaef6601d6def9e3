"""What turn-taking takes from the server's config and a session's settings: the
interruption rules, and the pause at which ``semantic_vad`` holds a turn."""

from pydantic import BaseModel, ConfigDict, Field

SEMANTIC_PAUSE_MS = 200
"""The pause at which the VAD asks the model (Pipecat's VAD stop with Smart Turn)."""


class InterruptionRules(BaseModel):
    """When speech during an answer interrupts it. ``min_duration_ms: 0`` with
    ``ignore_backchannels: false`` is OpenAI's behaviour: every onset interrupts at once."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_duration_ms: int = Field(150, ge=0, le=5_000)
    """Speech shorter than this (a click, a knock) never interrupts, and its words are first
    looked at once it has lasted this long. The words, not the length, keep coughs and hums
    out (``ignore_backchannels``), so this stays short: at 150 ms a real interruption is
    decided after 165 ms of speech (p50) against 310 ms at 300 ms, none missed, with about as
    many backchannels taken (57 and 54 of 180; ``make bench-backchannel-words``,
    docs/bench/notes/backchannels.md, "When the words are looked at")."""
    ignore_backchannels: bool = True
    """Speech whose transcript is only backchannel words (``BACKCHANNEL_WORDS``), function
    words, sounds or no words at all (noise) never interrupts: one STT call per candidate, made once it has
    lasted ``min_duration_ms`` and again every ``RECHECK_MS`` of speech after."""

    audio_lead_ms: int | None = Field(200, ge=50, le=10_000)
    """Over a WebSocket, an answer's audio is sent at most this far ahead of what the client
    has played, so that a candidate pauses the sound within it (the server stops sending; a
    WebRTC track is paused by the server itself); 200 is what was measured. ``None``: sent
    as fast as it is made, as OpenAI does (``cluster/loadtest.yaml`` keeps that rule); the
    client then hears the answer until ``speech_started``."""

    @property
    def immediate(self) -> bool:
        return self.min_duration_ms == 0 and not self.ignore_backchannels

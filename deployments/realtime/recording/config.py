"""What the operator allows to be recorded, and the bounds of each recording and of all of
them (``ingress.recording``; ``docs/recording.md``)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from handlers.audio import REALTIME_RATE

WAV_MAX_BYTES = (1 << 32) - 1
"""A WAV file's sizes are 32-bit: no recording may be larger."""
WAV_HEADER_BYTES = 44
REPORT_BYTES = 64 << 10
"""Room a recording holds for its report from its start (a larger report takes more at the end)."""


def peak_bytes(left: int, right: int) -> int:
    """The most a recording with raw channels of ``left`` and ``right`` bytes holds on disk:
    both, the WAV made from them while they are still there, and its report."""
    return left + right + WAV_HEADER_BYTES + 2 * max(left, right) + REPORT_BYTES


class RecordingConfig(BaseModel):
    """Opt-in recording: a session's audio as one stereo WAV (left the caller, right the
    agent) and a JSON report beside it (``docs/recording.md``). Off unless ``directory`` is set."""

    model_config = ConfigDict(extra="forbid")

    directory: str | None = None
    """Where recordings and reports are written; ``None``: recording is off, nothing is written."""
    mode: Literal["on_request", "always"] = "on_request"
    """``on_request``: the sessions that ask (``/v1/realtime?record=true``); ``always``: every
    session, WebRTC and phone calls included."""
    max_session_s: float = Field(3600.0, gt=0)
    """A recording stops at this length (its report says ``truncated``); the session goes on."""
    max_session_bytes: int | None = Field(None, ge=1 << 16, le=WAV_MAX_BYTES)
    """The same cap in bytes of WAV (96 000 a second); ``None``: only ``max_session_s``."""
    max_total_bytes: int | None = Field(10 << 30, ge=1 << 20)
    """The directory's recordings, at most, live ones included as they are written: there, new
    recordings are refused and live ones stop; nothing is deleted for room. ``None``: no bound."""
    retention_days: float | None = Field(30.0, gt=0)
    """Recordings last written longer ago than this are deleted (at each recorded session's
    end, and before a recording is refused for room); ``None``: kept until deleted."""

    def session_cap_bytes(self) -> int:
        """The largest recording, in WAV bytes: the smaller cap, and a WAV's own limit."""
        by_time = WAV_HEADER_BYTES + int(self.max_session_s * REALTIME_RATE) * 4
        return min(by_time, self.max_session_bytes or WAV_MAX_BYTES, WAV_MAX_BYTES)

    @model_validator(mode="after")
    def _one_recording_fits(self) -> "RecordingConfig":
        raw = (self.session_cap_bytes() - WAV_HEADER_BYTES) // 2  # one channel's
        if self.max_total_bytes is not None and self.max_total_bytes < peak_bytes(raw, raw):
            raise ValueError(
                f"recording max_total_bytes ({self.max_total_bytes}) must hold one whole recording while "
                f"its WAV is made ({peak_bytes(raw, raw)} bytes by max_session_s and max_session_bytes)"
            )
        return self

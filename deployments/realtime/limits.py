"""Per-session limits on what a client sends, enforced where the bytes arrive.

A client may send audio faster than real time (a recorded file, a catch-up after a network
stall), but not without bound: a flood would otherwise grow the replica's memory and put
every control event of the session behind the backlog. Each event over a limit is refused
with an ``error`` that names the limit, and nothing else of the session is lost; a client
that keeps going over limits (``strikes`` refusals within ``strike_window_s``) is closed
with 1008 (policy violation), so one client can neither starve its replica's CPU nor hold a
session slot by flooding. A transport of another protocol (a Twilio media stream) has every
message of its caller admitted here too, and the messages it refuses count as refusals.
The limits and their defaults: :class:`deployments.realtime.session_config.InputLimits`.
"""

import time
from collections import deque

from aiolimiter import AsyncLimiter

from deployments.realtime.protocol import ProtocolError
from deployments.realtime.session_config import InputLimits


class Violation(ProtocolError):
    """An event refused that counts toward closing the session (``strikes``): one over a
    limit, or a message a transport of another protocol refuses (``transport.CallerMessage``)."""


class LimitExceeded(Violation):
    """An event refused by a limit: ``code`` names it, ``param`` the setting."""


class TooManyViolations(Exception):
    """The client kept going over limits: the session closes with 1008."""


class InputGuard:
    """One session's meters: each ``admit_*`` takes its share or raises ``LimitExceeded``."""

    def __init__(self, limits: InputLimits) -> None:
        self.limits = limits
        self._events = AsyncLimiter(limits.event_burst, limits.event_burst / limits.events_per_s)
        self._audio = AsyncLimiter(limits.audio_burst_s, limits.audio_burst_s / limits.audio_rate)
        self._refusals: deque[float] = deque()

    async def admit_event(self, size: int) -> None:
        limits = self.limits
        if size > limits.max_event_bytes:
            message = f"event of {size} bytes is over this server's limit of {limits.max_event_bytes} bytes"
            raise LimitExceeded("event_too_large", message, "max_event_bytes")
        if not await _took(self._events, 1):
            raise LimitExceeded("event_rate_exceeded", f"over {limits.events_per_s:g} events/s", "events_per_s")

    async def admit_audio(self, seconds: float) -> None:
        limits = self.limits
        if not await _took(self._audio, seconds):
            message = f"audio sent faster than {limits.audio_rate:g}x real time (burst {limits.audio_burst_s:g} s)"
            raise LimitExceeded("input_audio_rate_exceeded", message, "audio_rate")

    def refused(self) -> None:
        """Count a refusal; raise ``TooManyViolations`` once there are too many too fast."""
        now = time.monotonic()
        self._refusals.append(now)
        while self._refusals[0] < now - self.limits.strike_window_s:
            self._refusals.popleft()
        if len(self._refusals) >= self.limits.strikes:
            raise TooManyViolations(
                f"{len(self._refusals)} events refused within {self.limits.strike_window_s:g} s; closing the session"
            )


async def _took(limiter: AsyncLimiter, amount: float) -> bool:
    """Take ``amount`` now, or say it is not there: the receive loop never waits for a
    bucket to drain (``acquire`` returns without suspending once there is capacity)."""
    if amount > limiter.max_rate or not limiter.has_capacity(amount):
        return False
    await limiter.acquire(amount)
    return True

"""Timing of long-polls and retries.

Long-polls started together (a worker's polls after a restart, a directory's host watches)
would otherwise all time out, and be re-sent, at the same instant; retries after a failure
would otherwise hammer a host that is restarting.
"""

import random

SPREAD = 0.25


def spread(seconds: float) -> float:
    """``seconds`` moved at random by up to ``SPREAD`` of itself either way."""
    return seconds * random.uniform(1 - SPREAD, 1 + SPREAD)


class Backoff:
    """Delays between retries of a failing call: doubling from ``first_s`` up to ``max_s``."""

    def __init__(self, first_s: float = 0.05, max_s: float = 2.0) -> None:
        self._first_s = first_s
        self._max_s = max_s
        self._next_s = first_s

    @property
    def failing(self) -> bool:
        """Whether a failure was reported since the last success."""
        return self._next_s != self._first_s

    def delay(self) -> float:
        """The (spread) delay before the next retry; each call doubles the one after."""
        delay, self._next_s = self._next_s, min(self._next_s * 2, self._max_s)
        return spread(delay)

    def reset(self) -> None:
        """The call succeeded: the next failure starts again from ``first_s``."""
        self._next_s = self._first_s

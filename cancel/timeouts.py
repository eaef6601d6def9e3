"""Spreading of long-poll timeouts.

Long-polls started together (a worker's polls after a restart, a directory's host watches)
would otherwise all time out, and be re-sent, at the same instant.
"""

import random

SPREAD = 0.25


def spread(seconds: float) -> float:
    """``seconds`` moved at random by up to ``SPREAD`` of itself either way."""
    return seconds * random.uniform(1 - SPREAD, 1 + SPREAD)

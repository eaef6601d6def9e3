"""Every rule of the single-process CancelScope (upstream speech-to-speech semantics)."""

import pytest

from cancel import CancelScope
from cancel.scope import GENERATION_MASK

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""


def test_starts_fresh() -> None:
    scope = CancelScope()
    assert scope.generation == 0
    assert not scope.is_stale(0)


def test_cancel_supersedes_the_generation() -> None:
    scope = CancelScope()
    assert scope.cancel() == 1
    assert scope.generation == 1
    assert scope.is_stale(0)
    assert not scope.is_stale(1)


def test_every_cancel_supersedes_all_earlier_generations() -> None:
    scope = CancelScope()
    scope.cancel()
    scope.cancel()
    assert scope.is_stale(0)
    assert scope.is_stale(1)
    assert not scope.is_stale(2)


def test_generation_wraps_at_32_bits() -> None:
    scope = CancelScope()
    scope._gen = GENERATION_MASK  # 2**32 - 1 cancels would take too long
    assert scope.cancel() == 0
    assert scope.is_stale(GENERATION_MASK)
    assert not scope.is_stale(0)

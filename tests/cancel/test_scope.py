"""Every rule of the single-process CancelScope (upstream speech-to-speech semantics)."""

from cancel import CancelScope
from cancel.scope import GENERATION_MASK


def test_starts_fresh() -> None:
    scope = CancelScope()
    assert scope.generation == 0
    assert not scope.discarding
    assert not scope.is_stale(0)


def test_cancel_supersedes_the_generation_and_raises_the_guard() -> None:
    scope = CancelScope()
    assert scope.cancel() == 1
    assert scope.generation == 1
    assert scope.discarding
    assert scope.is_stale(0)
    assert not scope.is_stale(1)


def test_generation_wraps_at_32_bits() -> None:
    scope = CancelScope()
    scope._gen = GENERATION_MASK  # 2**32 - 1 cancels would take too long
    assert scope.cancel() == 0
    assert scope.is_stale(GENERATION_MASK)
    assert not scope.is_stale(0)
    scope.response_done(GENERATION_MASK)  # the discarded generation survives the wrap
    assert not scope.discarding


def test_response_done_without_generation_clears_the_guard() -> None:
    scope = CancelScope()
    scope.cancel()
    scope.response_done()
    assert not scope.discarding


def test_response_done_of_the_discarded_generation_clears_the_guard() -> None:
    scope = CancelScope()
    scope.cancel()
    scope.response_done(0)
    assert not scope.discarding


def test_response_done_of_the_current_generation_clears_the_guard() -> None:
    scope = CancelScope()
    scope.cancel()
    scope.response_done(1)
    assert not scope.discarding


def test_response_done_of_an_unrelated_generation_keeps_the_guard() -> None:
    scope = CancelScope()
    scope.cancel()
    scope.cancel()  # discarded: 1, current: 2
    scope.response_done(0)
    assert scope.discarding
    scope.response_done(1)
    assert not scope.discarding


def test_response_done_with_nothing_discarded_clears_the_guard() -> None:
    scope = CancelScope()
    scope.cancel()
    scope.new_response()
    scope.response_done(7)
    assert not scope.discarding


def test_new_response_clears_the_guard_and_keeps_the_generation() -> None:
    scope = CancelScope()
    scope.cancel()
    scope.new_response()
    assert not scope.discarding
    assert scope.generation == 1
    assert scope.is_stale(0)


def test_reset_clears_the_guard_but_never_rewinds_the_generation() -> None:
    scope = CancelScope()
    scope.cancel()
    scope.reset()
    assert not scope.discarding
    assert scope.generation == 1
    assert scope.is_stale(0)  # work captured before the reset stays stale

"""Generation tokens: a restarted host's tokens never equal an earlier incarnation's."""

import pickle
from dataclasses import FrozenInstanceError

import pytest

from cancel import STALE_TOKEN, ScopeTicket, make_token, new_epoch
from cancel.scope import GENERATION_MASK
from cancel.tokens import EPOCH_BITS


def test_epochs_are_random_62_bit_numbers() -> None:
    epochs = {new_epoch() for _ in range(1000)}
    assert len(epochs) == 1000
    assert all(0 <= epoch < 2**EPOCH_BITS for epoch in epochs)


def test_same_generation_of_two_incarnations_differs() -> None:
    first, second = new_epoch(), new_epoch()
    for generation in (0, 1, GENERATION_MASK):
        assert make_token(first, generation) != make_token(second, generation)


def test_token_keeps_epoch_and_32_bit_generation_apart() -> None:
    token = make_token(5, GENERATION_MASK)
    assert token >> 32 == 5
    assert token & GENERATION_MASK == GENERATION_MASK
    assert make_token(5, GENERATION_MASK + 1) == make_token(5, 0)


def test_stale_token_matches_no_token() -> None:
    assert STALE_TOKEN < 0 <= make_token(0, 0)


def test_ticket_is_frozen_picklable_and_names_its_generation() -> None:
    ticket = ScopeTicket("sid", None, 3, make_token(9, 4), make_token(9, 4))  # type: ignore[arg-type]
    assert ticket.generation == 4
    assert pickle.loads(pickle.dumps(ticket)) == ticket
    with pytest.raises(FrozenInstanceError):
        ticket.version = 4  # type: ignore[misc]

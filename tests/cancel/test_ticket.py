"""The ticket a request carries: frozen, picklable, and stale from birth when superseded."""

import pickle
from dataclasses import FrozenInstanceError

import pytest

from cancel import ScopeTicket


def test_ticket_is_frozen_and_picklable() -> None:
    ticket = ScopeTicket("sid", None, 3, 4, 4)  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(ticket)) == ticket
    with pytest.raises(FrozenInstanceError):
        ticket.version = 4  # type: ignore[misc]

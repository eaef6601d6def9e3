"""The ticket a request carries (frozen, picklable, stale from birth when superseded), and the
scope placement config."""

import pickle
from dataclasses import FrozenInstanceError

import pydantic
import pytest

from cancel import ScopePlacementConfig, ScopeTicket

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""


def test_ticket_is_frozen_and_picklable() -> None:
    ticket = ScopeTicket("sid", None, 3, 4, 4)  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(ticket)) == ticket
    with pytest.raises(FrozenInstanceError):
        ticket.version = 4  # type: ignore[misc]


def test_placement_config_rejects_bad_values() -> None:
    assert ScopePlacementConfig() == ScopePlacementConfig(mode="shared", num_hosts=2)
    with pytest.raises(pydantic.ValidationError):
        ScopePlacementConfig(num_hosts=0)
    with pytest.raises(pydantic.ValidationError):
        ScopePlacementConfig(mode="per-node")  # type: ignore[arg-type]

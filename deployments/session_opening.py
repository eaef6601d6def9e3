"""What a client brought to its session's opening, handed from a route to the ingress's
``serve``: how it was let in, the record it resumes, and what it asked for."""

from dataclasses import dataclass

from deployments.access import Admission
from deployments.session_store.writer import StoredSession


@dataclass(frozen=True)
class SessionOpening:
    admission: Admission
    stored: StoredSession | None = None
    """The record it resumes (``None``: a new session)."""
    drain_notice: bool = False
    """It asked for ``session.draining`` events."""
    record: bool = False
    """It asked to be recorded."""

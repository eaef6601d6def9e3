"""The recordings' byte budget (``max_total_bytes``), held while recordings are written.

A recording takes its share of the directory before it writes, in chunks (``CHUNK_BYTES``),
each granted only while everything in the directory (what is written, and every live
recording's share) stays within the budget. A live recording's share is on disk, as the size
of a sparse file of its own (``.<stem>.reserved``), so that ingress replicas sharing the
directory count each other's; the count and the grant are one step under the directory's
lock (``flock`` on ``.budget.lock``). A share covers the most the recording will hold: both
raw channels, and then the WAV made from them while they are still there, and its report.

When the budget is reached a new recording is refused and a live one stops (its WAV is made
from what it has): nothing is deleted to make room but what is past ``retention_days``.
Runs in the writer thread and worker threads, never on the event loop.
"""

import contextlib
import fcntl
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from deployments.realtime.recording.config import peak_bytes
from deployments.realtime.recording.retention import sweep, used_bytes

logger = logging.getLogger(__name__)

CHUNK_BYTES = 2 << 20
"""A share is taken this much at a time (about 10 s of a recording's peak), or a 64th of a
smaller budget: one count of the directory per chunk, and at most this much held unwritten
per live recording."""
LOCK_FILE = ".budget.lock"


class Budget:
    """The directory's ``max_total_bytes``, shared by this process's recordings and, through
    the lock and the shares on disk, by other processes' writing to the same directory."""

    def __init__(self, directory: Path, max_total_bytes: int, retention_days: float | None) -> None:
        self.directory = directory
        self.max_total_bytes = max_total_bytes
        self._retention_days = retention_days
        self._chunk = min(CHUNK_BYTES, max_total_bytes // 64)
        self._lock = threading.Lock()
        """Threads of this process; ``flock`` orders processes."""

    def grant(self, reserved: Path, held: int, more: int) -> int | None:
        """Take ``more`` bytes (a chunk if there is room) for the share whose file is
        ``reserved`` and holds ``held``; returns what it then holds, ``None`` if there is no room."""
        with self._lock, self._locked():
            free = self.max_total_bytes - used_bytes(self.directory)
            if free < more and self._retention_days is not None:  # expired recordings make room first
                sweep(self.directory, self._retention_days)
                free = self.max_total_bytes - used_bytes(self.directory)
            if free < more:
                return None
            held += min(max(more, self._chunk), free)
            fd = os.open(reserved, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.ftruncate(fd, held)  # sparse: a size, not disk
            finally:
                os.close(fd)
            return held

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The directory's lock, across processes."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock


class Share:
    """One recording's part of the budget. Used by one thread at a time: the writer thread
    while the recording is written, then the thread that finishes it."""

    def __init__(
        self, budget: Budget | None, stem: str, on_limited: Callable[[str], object] = lambda outcome: None
    ) -> None:
        """``budget``: ``None`` where there is no bound; ``on_limited``: called once, in this
        thread, with ``refused`` (nothing was ever granted) or ``stopped`` when there is no room."""
        self._budget = budget
        self._reserved = budget.directory / f".{stem}.reserved" if budget is not None else None
        self._stem = stem
        self._on_limited = on_limited
        self.held = 0
        self.limited: str | None = None
        """``refused`` or ``stopped`` once the budget had no room for it: it writes no more."""
        self._raw = [0, 0]
        """Each raw channel's size on disk."""

    def open(self) -> None:
        """The recording's first chunk, before it writes anything."""
        if not self.hold(peak_bytes(0, 0)):
            self._limit("refused")

    def extend(self, channel: int, end: int) -> bool:
        """Whether raw channel ``channel`` (0 left, 1 right) may grow to ``end`` bytes; once
        one may not, the recording writes no more."""
        if self.limited is not None:
            return False
        grown = list(self._raw)
        grown[channel] = max(grown[channel], end)
        if not self.hold(peak_bytes(*grown)):
            self._limit("stopped")
            return False
        self._raw = grown
        return True

    def cut(self, channel: int, size: int) -> None:
        """Raw channel ``channel`` was cut to ``size`` bytes."""
        self._raw[channel] = min(self._raw[channel], size)

    def hold(self, need: int) -> bool:
        """Whether the recording may hold ``need`` bytes in all; takes more if it must."""
        if self._budget is None or self._reserved is None or need <= self.held:
            return True
        if self.limited is not None:
            return False
        held = self._budget.grant(self._reserved, self.held, need - self.held)
        if held is None:
            return False
        self.held = held
        return True

    def _limit(self, outcome: str) -> None:
        assert self._budget is not None
        self.limited = outcome
        logger.warning(
            "recording %s %s: the recordings directory is at its max_total_bytes (%d)",
            self._stem,
            outcome,
            self._budget.max_total_bytes,
        )
        self._on_limited(outcome)

    def release(self) -> None:
        """The recording is finished: its files count as they are."""
        if self._reserved is not None:
            self._reserved.unlink(missing_ok=True)

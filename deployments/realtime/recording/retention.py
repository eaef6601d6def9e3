"""The recordings directory's files: what they hold, and deleting the expired ones.

A recording is every file of one stem (``<start>-<session id>``): its WAV, its report, and
while it is being written its two raw channels and its share of the byte budget
(``.<stem>.reserved``, :mod:`recording_budget`). Only age deletes a recording: whatever was
last written more than ``retention_days`` ago goes (raw files that old are a lost replica's
leftovers). Room is never made by deleting: at ``max_total_bytes`` new recordings are
refused instead, so that no client's recording can push out another's. Only files named as
recordings are touched, and several replicas may share the directory: a file already gone is
fine. Runs in a thread, never on the event loop.
"""

import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

RECORDING_FILE = re.compile(r"^\.?(\d{8}T\d{12}Z-[A-Za-z0-9_-]+)\.(wav|json|left\.raw|right\.raw|reserved)$")
"""A recording's files: ``<stem>.wav``, ``<stem>.json``, ``.<stem>.left.raw``,
``.<stem>.right.raw``, ``.<stem>.reserved``."""
DAY_S = 86_400


@dataclass
class _Recording:
    files: list[Path] = field(default_factory=list)
    size: int = 0
    """Its files' bytes (a share's file is a size, not disk: not counted here)."""
    reserved: int = 0
    """The share of the budget it holds while it is written: what it may grow to."""
    written_at: float = 0.0
    """The newest file's modification time."""

    @property
    def counted(self) -> int:
        """Its bytes against the budget: what it holds, or what it may grow to."""
        return max(self.size, self.reserved)


def sweep(directory: Path, retention_days: float | None, now: float | None = None) -> list[str]:
    """Delete the recordings last written more than ``retention_days`` ago; returns their
    stems, oldest first."""
    if retention_days is None:
        return []
    cutoff = (time.time() if now is None else now) - retention_days * DAY_S
    recordings = _recordings(directory)
    expired = sorted((kept.written_at, stem) for stem, kept in recordings.items() if kept.written_at < cutoff)
    for _, stem in expired:
        for path in recordings[stem].files:
            path.unlink(missing_ok=True)
    deleted = [stem for _, stem in expired]
    if deleted:
        logger.info("recordings past retention deleted: %s", ", ".join(deleted))
    return deleted


def used_bytes(directory: Path) -> int:
    """The recordings' bytes, each live one's share counted whole."""
    return sum(kept.counted for kept in _recordings(directory).values())


def _recordings(directory: Path) -> dict[str, _Recording]:
    recordings: dict[str, _Recording] = {}
    try:
        paths = list(directory.iterdir())
    except FileNotFoundError:
        return recordings
    for path in paths:
        match = RECORDING_FILE.match(path.name)
        if match is None:
            continue
        try:
            stat = path.stat()
        except FileNotFoundError:  # another replica's sweep took it
            continue
        recording = recordings.setdefault(match[1], _Recording())
        recording.files.append(path)
        if match[2] == "reserved":
            recording.reserved = stat.st_size
        else:
            recording.size += stat.st_size
        recording.written_at = max(recording.written_at, stat.st_mtime)
    return recordings

"""Keeping the recordings directory within its bounds, at each recorded session's end.

A recording is every file of one stem (``<start>-<session id>``): its WAV, its report, and
while it is being written its two raw channels. First whatever was last written more than
``retention_days`` ago goes (raw files that old are a lost replica's leftovers), then, while
the directory holds more than ``max_total_bytes``, the finished recordings, oldest first.
A recording still being written is never deleted for room. Only files named as recordings
are touched, and several replicas may share the directory: a file already gone is fine.
Runs in a thread, never on the event loop.
"""

import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

RECORDING_FILE = re.compile(r"^\.?(\d{8}T\d{12}Z-[A-Za-z0-9_-]+)\.(wav|json|left\.raw|right\.raw)$")
"""A recording's files: ``<stem>.wav``, ``<stem>.json``, ``.<stem>.left.raw``, ``.<stem>.right.raw``."""
DAY_S = 86_400


@dataclass
class _Recording:
    files: list[Path] = field(default_factory=list)
    size: int = 0
    written_at: float = 0.0
    """The newest file's modification time."""
    live: bool = False
    """Still being written: it has raw channels."""


def sweep(
    directory: Path, max_total_bytes: int | None, retention_days: float | None, now: float | None = None
) -> list[str]:
    """Delete what is past the bounds; returns the stems deleted, oldest first."""
    recordings = _recordings(directory)
    cutoff = (time.time() if now is None else now) - (retention_days or 0) * DAY_S
    expired = [stem for stem, kept in recordings.items() if retention_days is not None and kept.written_at < cutoff]
    total = sum(kept.size for kept in recordings.values())
    deleted: list[str] = []
    for stem in sorted(expired, key=lambda stem: recordings[stem].written_at):
        total -= _delete(recordings.pop(stem))
        deleted.append(stem)
    finished = [stem for stem, kept in recordings.items() if not kept.live]
    for stem in sorted(finished, key=lambda stem: recordings[stem].written_at):
        if max_total_bytes is None or total <= max_total_bytes:
            break
        total -= _delete(recordings.pop(stem))
        deleted.append(stem)
    if deleted:
        logger.info("recordings deleted for retention or room: %s", ", ".join(deleted))
    return deleted


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
        recording.size += stat.st_size
        recording.written_at = max(recording.written_at, stat.st_mtime)
        recording.live |= match[2].endswith(".raw")
    return recordings


def _delete(recording: _Recording) -> int:
    """Delete the recording's files; returns the bytes they held."""
    for path in recording.files:
        path.unlink(missing_ok=True)
    return recording.size

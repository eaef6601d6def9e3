"""Whether a session is recorded, and its recording and report from its start to its end.

Recording is opt-in twice: the server's config must name a directory (``ingress.recording``,
off by default) and, unless its ``mode`` is ``always``, the session must ask
(``/v1/realtime?record=true``). A session that asks where the server records nothing is told
so (``error`` ``recording_not_enabled``) and goes on unrecorded.

A recorded session's :class:`SessionCapture` sees what the session takes in (the caller's
audio, from the one place all of it passes: ``InputAudioEvents``) and what it sends (the
outbox's ``on_sent``). At its end the WAV is finished, the report written beside it and the
expired recordings deleted (:mod:`retention`), in a detached task and threads: the session's
end waits for none of it, and the replica's :class:`Recordings` waits for all of it when it
stops. Where the recordings' byte budget has no room (:mod:`recording_budget`), a new
recording is refused and a live one stops: counted (``on_limited``), logged, and a client
that asked is told (``error`` ``recording_refused`` or ``recording_stopped``); the session
goes on unrecorded.
"""

import asyncio
import json
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from cancel import spawn_detached
from deployments.realtime.protocol import ProtocolError, error_event
from deployments.realtime.recording.budget import Budget, Share
from deployments.realtime.recording.config import WAV_HEADER_BYTES, RecordingConfig
from deployments.realtime.recording.report import SessionReport
from deployments.realtime.recording.retention import sweep
from deployments.realtime.recording.wav import StereoRecording
from deployments.realtime.transports.wire_audio import WireAudio

logger = logging.getLogger(__name__)

NOT_ENABLED = "this server does not record sessions: this session goes on unrecorded"
FULL = {
    "refused": "the server's recordings are at their size limit: this session goes on unrecorded",
    "stopped": "the server's recordings are at their size limit: this session's recording stopped here "
    "and the session goes on unrecorded",
}
"""What a client that asked is told, by what the budget did to its recording."""


class SessionCapture:
    """One session's recording and report."""

    def __init__(self, replica: "Recordings", session_id: str, asked: bool) -> None:
        """``replica``: its config, byte budget and finishing writes; ``asked``: the client
        asked to be recorded."""
        config = self._config = replica.config
        assert config.directory is not None
        self._directory = Path(config.directory)
        self._stem = f"{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}-{session_id}"
        self._asked = asked
        self._on_limited = replica.on_limited
        self.tell: Callable[[Any], None] = lambda event: None
        """Sends the client an event: the session sets it to its outbox's ``put``."""
        loop = asyncio.get_running_loop()
        share = Share(replica.budget, self._stem, lambda outcome: loop.call_soon_threadsafe(self._limited, outcome))
        cap_frames = (config.session_cap_bytes() - WAV_HEADER_BYTES) // 4
        self._recording = StereoRecording(self._directory, self._stem, cap_frames, share)
        self._report = SessionReport(session_id, replica.models, self._recording)
        self._finishing = replica.finishing

    @property
    def report_path(self) -> Path:
        return self._directory / f"{self._stem}.json"

    def heard(self, data: bytes, wire: WireAudio) -> None:
        """Caller audio the session took in (``data`` in its input format ``wire``)."""
        self._recording.caller(data, wire)

    def sent(self, event: Any) -> None:
        """The outbox sent ``event`` to the client."""
        self._recording.sent(event)
        self._report.sent(event)

    def finish(self) -> None:
        """The session ended: the recording and its report are written in the background."""
        task = spawn_detached(self._finish())
        self._finishing.add(task)
        task.add_done_callback(self._finishing.discard)

    def _limited(self, outcome: str) -> None:
        """The budget refused (``refused``) or stopped (``stopped``) the recording."""
        self._on_limited(outcome)
        if self._asked:
            code = "recording_refused" if outcome == "refused" else "recording_stopped"
            self.tell(error_event(ProtocolError(code, FULL[outcome], "record"), "server_error"))

    async def _finish(self) -> None:
        try:
            recording = await self._recording.close()
            if recording is not None:  # else refused: nothing to write
                await asyncio.to_thread(self._write, self._report.finished(recording))
        except Exception:
            logger.exception("the recording %s could not be finished", self._stem)

    def _write(self, report: dict[str, Any]) -> None:
        """The report beside the recording (whole or not at all; without its lists where the
        budget has no room for them), then the expired recordings' deletion."""
        share = self._recording.share
        wav = self._recording.wav_path.stat().st_size if self._recording.wav_path.exists() else 0
        data = json.dumps(report, indent=2).encode()
        if not share.hold(wav + len(data)):
            data = json.dumps(unlisted(report), indent=2).encode()  # within what it holds from its start
        partial = self._directory / f".{self._stem}.json"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(partial, self.report_path)
        share.release()
        sweep(self._directory, self._config.retention_days)


class Recordings:
    """The replica's recordings: which sessions are recorded, and those still being written."""

    def __init__(
        self,
        config: RecordingConfig,
        models: Mapping[str, str] | None = None,
        on_limited: Callable[[str], None] = lambda outcome: None,
    ) -> None:
        """``models``: the name of each stage's model, as the reports list them;
        ``on_limited``: a recording was ``refused`` or ``stopped`` by the byte budget."""
        self.config, self.models, self.on_limited = config, dict(models or {}), on_limited
        self.finishing: set[asyncio.Task[Any]] = set()
        """Sessions' recordings and reports still being written."""
        self.budget: Budget | None = None
        if config.directory is not None and config.max_total_bytes is not None:
            self.budget = Budget(Path(config.directory), config.max_total_bytes, config.retention_days)

    def open(self, session_id: str, asked: bool) -> tuple[SessionCapture | None, ProtocolError | None]:
        """The session's capture (``None``: not recorded), and the refusal its client is sent
        if it asked for a recording this server does not make."""
        if self.config.directory is None:
            return None, ProtocolError("recording_not_enabled", NOT_ENABLED, "record") if asked else None
        if asked or self.config.mode == "always":
            return SessionCapture(self, session_id, asked), None
        return None, None

    async def written(self) -> None:
        """Until every ended session's recording and report are on disk."""
        await asyncio.gather(*self.finishing, return_exceptions=True)


@dataclass(frozen=True)
class RecordingRequest:
    """What a new session is given: the replica's recordings, and whether its client asked."""

    recordings: Recordings
    asked: bool = False

    def open(self, session_id: str) -> tuple[SessionCapture | None, ProtocolError | None]:
        return self.recordings.open(session_id, self.asked)


class SentObserver(Protocol):
    def sent(self, event: Any) -> None: ...


def each(observers: Iterable[SentObserver | None]) -> Callable[[Any], None]:
    """One outbox ``on_sent`` that tells every observer given (``None``s left out), in order."""
    chosen = tuple(observer.sent for observer in observers if observer is not None)

    def sent(event: Any) -> None:
        for observer in chosen:
            observer(event)

    return sent


def unlisted(report: dict[str, Any]) -> dict[str, Any]:
    """The report with its lists only counted: what fits in the room a recording holds for it."""
    lists = ("items", "turns", "interruptions", "errors")
    counted = {name: len(report[name]) + report.get("not_listed", {}).get(name, 0) for name in lists}
    return report | {name: [] for name in lists} | {"not_listed": counted}

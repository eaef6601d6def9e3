"""A session's audio as one stereo WAV: left the caller's audio as the server took it in,
right the agent's as it was sent, on one timeline.

The timeline is the caller's audio (its samples at 24 kHz): an answer's frame is placed
where the caller's audio has got to when the frame is sent, or right after the frame before
it while that one still plays (answers are sent ahead of playing). When the caller stops
hearing the answer (a barge-in, a cancel, a truncate: the outbox's ``CLEAR_AUDIO``), what was
placed beyond that point was never heard, and is cut. The caller's channel is what a 24 kHz
PCM16 client sent, byte for byte (G.711 is decoded and resampled to 24 kHz); the agent's is
the answer's 24 kHz PCM16 before the transport's codec (a phone caller hears it as G.711).

Memory does not grow with the session: each channel goes to a raw file of its own through
one writer thread per process (:class:`RawTrack`), at most ``FLUSH_BYTES`` at a time, and
the WAV is made from the two at the end, in a thread. At its cap, or when the recordings'
byte budget has no more room for it (:mod:`recording_budget`: a share is taken before each
write), the recording stops and says so (``truncated``); the session goes on.
"""

import asyncio
import contextlib
import functools
import logging
import os
import wave
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from deployments.realtime.recording.budget import Share
from deployments.realtime.transports.audio_out import AnswerAudio, ClearAudio
from deployments.realtime.transports.wire_audio import WireAudio
from handlers import g711
from handlers.audio import REALTIME_RATE, StreamResampler, float_to_pcm16

logger = logging.getLogger(__name__)

RATE = REALTIME_RATE
"""Both channels' rate: the protocol's PCM16 rate, so a 24 kHz caller is kept as sent."""
FLUSH_BYTES = RATE * 2
"""A channel's audio held in memory before it goes to the writer: one second."""
BLOCK_FRAMES = RATE * 10
"""Frames read from the raw files at a time while the WAV is made."""


@functools.cache
def _writer() -> ThreadPoolExecutor:
    """The process's one writer thread: each track's writes run in the order they were asked."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="recording-writer")


class RawTrack:
    """One channel as raw PCM16 in a file, written by the writer thread with positional
    writes: a gap left between frames reads back as silence. Each write first takes its room
    from the recording's ``share`` of the budget; without room it is dropped."""

    def __init__(self, path: Path, cap_frames: int, share: Share, channel: int) -> None:
        self.path = path
        self._share = share
        self._channel = channel
        self.end = 0
        """Samples placed so far (after a cut: where it cut)."""
        self.capped = False
        """Audio was dropped at the cap."""
        self.failed: OSError | None = None
        self._cap = cap_frames
        self._pending = bytearray()
        self._pending_at = 0
        self._fd: int | None = None
        """Opened, and only used, in the writer thread."""

    def write(self, at: int, pcm16: bytes) -> None:
        """Place ``pcm16`` from sample ``at`` (not before :attr:`end`)."""
        room = max(self._cap - at, 0) * 2
        if len(pcm16) > room:
            self.capped = True
            pcm16 = pcm16[:room]
        if not pcm16:
            return
        if at != self._pending_at + len(self._pending) // 2:
            self._flush()
            self._pending_at = at
        self._pending += pcm16
        self.end = at + len(pcm16) // 2
        if len(self._pending) >= FLUSH_BYTES:
            self._flush()

    def cut(self, at: int) -> None:
        """Drop what was placed from sample ``at`` on."""
        if at >= self.end:
            return
        if at >= self._pending_at:
            del self._pending[(at - self._pending_at) * 2 :]
        else:
            self._pending.clear()
            self._pending_at = at
            self.submit(self._truncate, at * 2)
        self.end = at

    def close(self) -> "Future[None]":
        """Write what is pending and close the file; done once all of it is on disk."""
        self._flush()
        return _writer().submit(self._close)

    def _flush(self) -> None:
        if self._pending:
            self.submit(self._write, bytes(self._pending), self._pending_at * 2)
            self._pending_at += len(self._pending) // 2
            self._pending.clear()

    def submit(self, operation: Callable[..., object], *args: Any) -> None:
        """Run ``operation`` in the writer thread, after what was asked before; an ``OSError``
        fails the track."""
        _writer().submit(self._run, operation, *args)

    # ---- in the writer thread --------------------------------------------------------

    def _run(self, operation: Callable[..., object], *args: Any) -> None:
        if self.failed is not None:
            return
        try:
            operation(*args)
        except OSError as error:
            logger.warning("recording %s failed: %s", self.path.name, error)
            self.failed = error

    def _file(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        return self._fd

    def _write(self, data: bytes, offset: int) -> None:
        if not self._share.extend(self._channel, offset + len(data)):
            return
        view = memoryview(data)
        while view:
            written = os.pwrite(self._file(), view, offset)
            view, offset = view[written:], offset + written

    def _truncate(self, size: int) -> None:
        if self._fd is not None:  # else nothing was written
            os.ftruncate(self._fd, size)
            self._share.cut(self._channel, size)

    def _close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class StereoRecording:
    """The two channels on the caller's timeline, and the WAV made from them at the end."""

    def __init__(self, directory: Path, stem: str, cap_frames: int, share: Share | None = None) -> None:
        """``stem``: the WAV's name without ``.wav``; ``cap_frames``: the longest recording;
        ``share``: its part of the recordings' byte budget (``None``: no bound). Its first
        chunk is taken now, before anything is written."""
        self.wav_path = directory / f"{stem}.wav"
        self.share = share or Share(None, stem)
        self._caller = RawTrack(directory / f".{stem}.left.raw", cap_frames, self.share, 0)
        self._agent = RawTrack(directory / f".{stem}.right.raw", cap_frames, self.share, 1)
        self._caller.submit(self.share.open)
        self._now = 0
        """The caller's samples taken in so far: the timeline's present."""
        self._resampler: tuple[int, StreamResampler] | None = None

    def caller(self, data: bytes, wire: WireAudio) -> None:
        """Caller audio the session took in, in its input format ``wire``."""
        if wire.law is not None:
            data = self._upsampled(g711.decode(data, wire.law), wire.rate)
        self._caller.write(self._now, data)
        self._now += len(data) // 2

    def sent(self, event: Any) -> None:
        """What the outbox sent: an answer's frame is placed, a clear cuts what was not heard."""
        if isinstance(event, AnswerAudio) and event.pcm16:
            self._agent.write(max(self._now, self._agent.end), event.pcm16)
        elif isinstance(event, ClearAudio):
            self._agent.cut(self._now)

    def position_ms(self) -> int:
        """Where the timeline is now, in milliseconds from the start of the recording."""
        return self._now * 1000 // RATE

    def playing(self) -> bool:
        """Whether agent audio placed on the timeline is still to be heard."""
        return self._agent.end > self._now

    async def close(self) -> dict[str, Any] | None:
        """Finish the WAV (the raw files go) and say what it holds, for the report; ``None``
        if the budget refused the recording (nothing was written)."""
        if self._resampler is not None:  # what its filter still holds
            self._caller.write(self._now, float_to_pcm16(self._resampler[1].process(np.zeros(0), last=True)))
        tracks = (self._caller, self._agent)
        await asyncio.gather(*(asyncio.wrap_future(track.close()) for track in tracks))
        if self.share.limited == "refused":
            return None
        summary: dict[str, Any] = {
            "file": self.wav_path.name,
            "sample_rate": RATE,
            "channels": {"left": "caller", "right": "agent"},
            "truncated": self.share.limited is not None or any(track.capped for track in tracks),
        }
        if self.share.limited is not None:
            summary["truncated_by"] = "max_total_bytes"
        elif summary["truncated"]:
            summary["truncated_by"] = "max_session"
        try:
            frames = await asyncio.to_thread(interleave, self._caller.path, self._agent.path, self.wav_path)
        except OSError as error:
            logger.warning("recording %s could not be written: %s", self.wav_path.name, error)
            return summary | {"file": None, "error": str(error)}
        failed = next((track.failed for track in tracks if track.failed is not None), None)
        return summary | {"duration_s": round(frames / RATE, 3)} | ({"error": str(failed)} if failed else {})

    def _upsampled(self, pcm16: np.ndarray, rate: int) -> bytes:
        if self._resampler is None or self._resampler[0] != rate:
            # The telephone band holds nothing a steep filter would keep out: soxr's LQ is enough.
            self._resampler = (rate, StreamResampler(rate, RATE, quality="LQ"))
        return float_to_pcm16(self._resampler[1].process(pcm16.astype(np.float32) / 32768.0))


def interleave(left: Path, right: Path, wav_path: Path) -> int:
    """The two raw channels as one stereo WAV (the shorter padded with silence); the raw
    files are deleted. Returns the frames written."""
    sizes = [path.stat().st_size if path.exists() else 0 for path in (left, right)]
    frames = max(sizes) // 2
    with contextlib.ExitStack() as stack:
        paths = zip((left, right), sizes, strict=True)
        channels = [stack.enter_context(path.open("rb")) if size else None for path, size in paths]
        fd = os.open(wav_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        out = stack.enter_context(wave.open(stack.enter_context(os.fdopen(fd, "wb")), "wb"))
        out.setnchannels(2)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.setnframes(frames)
        for start in range(0, frames, BLOCK_FRAMES):
            count = min(BLOCK_FRAMES, frames - start)
            block = np.zeros((count, 2), dtype="<i2")
            for index, channel in enumerate(channels):
                if channel is not None:
                    samples = np.frombuffer(channel.read(count * 2), dtype="<i2")
                    block[: samples.size, index] = samples
            out.writeframesraw(block.tobytes())
    for path in (left, right):
        path.unlink(missing_ok=True)
    return frames

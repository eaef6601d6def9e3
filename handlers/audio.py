"""PCM16 / base64 / resampling helpers and the sample rates the pipeline speaks.

The OpenAI Realtime protocol carries base64 PCM16 mono at 24 kHz; silero-vad and
faster-whisper want float32 at 16 kHz; Piper speaks at its voice's own rate. Resampling
is done by soxr (libsoxr), not by hand.
"""

import base64

import numpy as np
import soxr

REALTIME_RATE = 24_000
"""Sample rate of ``pcm16`` audio in the OpenAI Realtime protocol."""

SPEECH_RATE = 16_000
"""Sample rate silero-vad and Whisper models work at."""


def pcm16_to_float(pcm: bytes) -> np.ndarray:
    """Little-endian PCM16 bytes -> float32 samples in [-1, 1)."""
    if len(pcm) % 2:
        raise ValueError(f"PCM16 audio must have an even number of bytes, got {len(pcm)}")
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


def float_to_pcm16(samples: np.ndarray) -> bytes:
    """float32 samples -> little-endian PCM16 bytes, clipping out-of-range values."""
    clipped = np.clip(samples, -1.0, 32767 / 32768)
    return (clipped * 32768.0).astype("<i2").tobytes()


def resample(samples: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Resample float32 mono audio with soxr's high-quality filter."""
    if from_rate == to_rate or samples.size == 0:
        return samples.astype(np.float32, copy=False)
    return soxr.resample(samples, from_rate, to_rate).astype(np.float32, copy=False)


def b64_audio_decode(data: str) -> bytes:
    """Decode a base64 audio payload; raises ``ValueError`` on malformed input."""
    try:
        return base64.b64decode(data, validate=True)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"audio is not valid base64: {exc}") from None


def b64_pcm16_encode(pcm: bytes) -> str:
    return base64.b64encode(pcm).decode("ascii")


class StreamResampler:
    """Chunk-by-chunk resampling that keeps filter state across chunks (no seams)."""

    def __init__(self, from_rate: int, to_rate: int, quality: str = "HQ") -> None:
        """``quality``: soxr's; its filter holds samples back (HQ from 8 to 16 kHz: 95 ms,
        LQ: 4 ms), and audio with nothing above the lower Nyquist needs no steep one."""
        self._stream = None
        if from_rate != to_rate:
            self._stream = soxr.ResampleStream(from_rate, to_rate, 1, dtype="float32", quality=quality)

    def process(self, samples: np.ndarray, last: bool = False) -> np.ndarray:
        """The next chunk's samples; ``last``: also what the filter still holds (the stream
        then ends)."""
        if self._stream is None:
            return samples.astype(np.float32, copy=False)
        return self._stream.resample_chunk(samples.astype(np.float32, copy=False), last=last)

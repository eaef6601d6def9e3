"""G.711 (μ-law and A-law, 8 bits a sample): the telephone's audio, as lookup tables.

Python's ``audioop`` did this until 3.13 removed it, and its successor ``audioop-lts`` only
installs on 3.13; so each direction is one numpy table, built once from the ITU-T G.711
rules as CPython's ``audioop`` applied them (μ-law from the top 14 bits, A-law from the top
13), and matching it on every input (``tests/handlers/test_g711.py``). A table lookup is
also cheaper than any per-sample arithmetic.
"""

import numpy as np

_SEGMENT_ENDS_ULAW = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF])
_SEGMENT_ENDS_ALAW = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF])
_ALL_SAMPLES = np.arange(-32768, 32768, dtype=np.int64)
"""Every PCM16 value, in the order of ``_index``."""


def _ulaw_codes(pcm: np.ndarray) -> np.ndarray:
    value = pcm >> 2
    mask = np.where(value < 0, 0x7F, 0xFF)
    magnitude = np.minimum(np.abs(value), 8159) + 0x21
    segment = np.searchsorted(_SEGMENT_ENDS_ULAW, magnitude)
    code = (segment << 4) | ((magnitude >> (segment + 1)) & 0x0F)
    return np.where(segment >= 8, 0x7F, code) ^ mask


def _alaw_codes(pcm: np.ndarray) -> np.ndarray:
    value = pcm >> 3
    negative = value < 0
    mask = np.where(negative, 0x55, 0xD5)
    magnitude = np.where(negative, -value - 1, value)
    segment = np.searchsorted(_SEGMENT_ENDS_ALAW, magnitude)
    step = np.where(segment < 2, 1, segment)
    code = (segment << 4) | ((magnitude >> step) & 0x0F)
    return np.where(segment >= 8, 0x7F, code) ^ mask


def _ulaw_samples(codes: np.ndarray) -> np.ndarray:
    inverted = ~codes & 0xFF
    magnitude = (((inverted & 0x0F) << 3) + 0x84) << ((inverted & 0x70) >> 4)
    return np.where(inverted & 0x80, 0x84 - magnitude, magnitude - 0x84)


def _alaw_samples(codes: np.ndarray) -> np.ndarray:
    flipped = codes ^ 0x55
    mantissa = (flipped & 0x0F) << 4
    segment = (flipped & 0x70) >> 4
    magnitude = np.where(
        segment == 0, mantissa + 8, np.where(segment == 1, mantissa + 0x108, (mantissa + 0x108) << (segment - 1))
    )
    return np.where(flipped & 0x80, magnitude, -magnitude)


_CODES = np.arange(256, dtype=np.int64)
_ENCODE = {"ulaw": _ulaw_codes(_ALL_SAMPLES).astype(np.uint8), "alaw": _alaw_codes(_ALL_SAMPLES).astype(np.uint8)}
_DECODE = {"ulaw": _ulaw_samples(_CODES).astype("<i2"), "alaw": _alaw_samples(_CODES).astype("<i2")}


def _index(pcm16: np.ndarray) -> np.ndarray:
    """PCM16 samples as indices into an encode table (``-32768`` is 0)."""
    return pcm16.astype("<i2", copy=False).view(np.uint16) ^ 0x8000


def encode(pcm16: np.ndarray, law: str) -> bytes:
    """16-bit samples as G.711 bytes of ``law`` (``"ulaw"`` or ``"alaw"``)."""
    return _ENCODE[law][_index(pcm16)].tobytes()


def decode(data: bytes, law: str) -> np.ndarray:
    """G.711 bytes of ``law`` as 16-bit samples."""
    return _DECODE[law][np.frombuffer(data, dtype=np.uint8)]

"""The G.711 tables against CPython's own ``audioop`` (still in 3.11), on every input."""

import warnings

import numpy as np
import pytest

from handlers import g711

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

pytestmark = pytest.mark.fast

EVERY_SAMPLE = np.arange(-32768, 32768, dtype="<i2")
EVERY_CODE = bytes(range(256))
CODECS = {"ulaw": (audioop.lin2ulaw, audioop.ulaw2lin), "alaw": (audioop.lin2alaw, audioop.alaw2lin)}


@pytest.mark.parametrize("law", CODECS)
def test_every_sample_encodes_as_audioop_encodes_it(law: str) -> None:
    encode_reference, _ = CODECS[law]
    assert g711.encode(EVERY_SAMPLE, law) == encode_reference(EVERY_SAMPLE.tobytes(), 2)


@pytest.mark.parametrize("law", CODECS)
def test_every_code_decodes_as_audioop_decodes_it(law: str) -> None:
    _, decode_reference = CODECS[law]
    assert g711.decode(EVERY_CODE, law).tobytes() == decode_reference(EVERY_CODE, 2)


@pytest.mark.parametrize("law", CODECS)
def test_a_decoded_code_encodes_back_to_itself(law: str) -> None:
    """Decoding then encoding is lossless for G.711's own values (both zeros of μ-law aside)."""
    again = g711.encode(g711.decode(EVERY_CODE, law), law)
    same = [a == b for a, b in zip(again, EVERY_CODE, strict=True)]
    assert sum(same) >= 255

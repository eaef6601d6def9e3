"""The real application on a real local Ray, and a client that talks to it the way any
OpenAI Realtime client would: through the stock ``openai`` SDK."""

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ray import serve
from realtime_client import APP_NAME, open_client
from suite_app import suite_config
from voice_page import browsers

from deployments.app import build_app
from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, resample


@pytest.fixture(scope="session")
def recordings_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the served app records the sessions that ask (``?record=true``); the others
    write nothing, so no other test pays for it."""
    return tmp_path_factory.mktemp("recordings")


@pytest.fixture(scope="session")
def realtime_url(serve_port: int, recordings_dir: Path) -> Iterator[str]:
    """``ws://…/v1`` of the application built from the local profile's defaults (``suite_config``)."""
    serve.run(build_app(suite_config(recordings_dir)), name=APP_NAME, route_prefix="/")
    yield f"ws://127.0.0.1:{serve_port}/v1"


@pytest.fixture
def pcm24k(speak: Callable[..., np.ndarray]) -> Callable[..., bytes]:
    """Spoken text as the client sends it: PCM16 at 24 kHz."""

    def _pcm(text: str, silence_s: float = 1.0) -> bytes:
        return float_to_pcm16(resample(speak(text, silence_s), SPEECH_RATE, REALTIME_RATE))

    return _pcm


@pytest.fixture
def connect(realtime_url: str) -> Callable[..., Any]:
    return lambda: open_client(realtime_url)


@pytest.fixture
async def browser_with(tmp_path: Path) -> AsyncIterator[Callable[[Path | None], Any]]:
    """Launches headless chromiums for the test (``voice_page.browsers``)."""
    async with browsers(tmp_path) as launch:
        yield launch

"""The real application on a real local Ray, and a client that talks to it the way any
OpenAI Realtime client would: through the stock ``openai`` SDK."""

import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI
from ray import serve

from deployments.app import build_app
from handlers.audio import REALTIME_RATE, SPEECH_RATE, float_to_pcm16, resample
from realtime_client import APP_NAME, MAX_SESSIONS, Client



def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def realtime_url(ray_local: None) -> Iterator[str]:
    """``ws://…/v1`` of the application built from the local profile's defaults."""
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    config = {"ingress": {"max_sessions": MAX_SESSIONS, "deployment": {"num_cpus": 0.25, "max_ongoing_requests": 16}}}
    serve.run(build_app(config), name=APP_NAME, route_prefix="/")
    yield f"ws://127.0.0.1:{port}/v1"
    serve.shutdown()


@pytest.fixture
def pcm24k(speak: Callable[..., np.ndarray]) -> Callable[..., bytes]:
    """Spoken text as the client sends it: PCM16 at 24 kHz."""

    def _pcm(text: str, silence_s: float = 1.0) -> bytes:
        return float_to_pcm16(resample(speak(text, silence_s), SPEECH_RATE, REALTIME_RATE))

    return _pcm


@pytest.fixture
def connect(realtime_url: str) -> Callable[..., Any]:
    @asynccontextmanager
    async def _connect() -> AsyncIterator[Client]:
        sdk = AsyncOpenAI(api_key="unused", websocket_base_url=realtime_url)
        async with sdk.realtime.connect(model="s2s") as connection:
            client = Client(connection)
            await client.until(lambda e: e.type == "session.created")
            yield client

    return _connect

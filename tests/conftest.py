"""Shared fixtures: one real local Ray cluster and the real CPU speech models, each
started once per test session (they take seconds to start)."""

import os
import secrets
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from cluster.redis_server import RedisServer
from deployments.ports import free_port
from deployments.serve_local import HAProxyRun
from handlers.audio import SPEECH_RATE, pcm16_to_float, resample
from handlers.stt import SpeechToText
from handlers.tts import TextToSpeech

# Ray exports recorded metrics every 2 s, not 10: a load test's report waits for one export
# after its run (loadtest.client.metrics.settled_scrape), and every Ray the suite starts (its own,
# the benches', the launchers') inherits this before it starts.
os.environ.setdefault("RAY_metrics_report_interval_ms", "2000")


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    import ray

    # Replicas inherit this environment: the API-key tests' app reads its key from it.
    os.environ.setdefault("S2S_E2E_API_KEY", secrets.token_urlsafe(24))
    # S2S_E2E_DATA_PATH=haproxy: the suite's cluster serves through HAProxy, as `make run`
    # does (its settings must be in the environment before Ray starts; docs/haproxy.md).
    haproxy = HAProxyRun.configure(os.environ) if os.environ.get("S2S_E2E_DATA_PATH") == "haproxy" else None
    # The dashboard serves the state API that leak checks use (ray.util.state). "local": a
    # cluster of the suite's own, even where another one (`ray start`, a test's simulated
    # cluster) is recorded in /tmp/ray as the machine's current one.
    ray.init(address="local", num_cpus=2, include_dashboard=True, log_to_driver=False)
    if haproxy is not None:
        haproxy.started(ray.get_runtime_context().get_node_id())
    yield
    ray.shutdown()
    if haproxy is not None:
        haproxy.stop(timeout_s=15)


@pytest.fixture(scope="session")
def serve_port(ray_local: None) -> Iterator[int]:
    """Serve started once on a free port, for every test that deploys an application."""
    from ray import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    yield port
    serve.shutdown()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server for the ``redis`` session store, started once."""
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def tts() -> TextToSpeech:
    return TextToSpeech()


@pytest.fixture(scope="session")
def stt() -> SpeechToText:
    return SpeechToText()


@pytest.fixture(scope="session")
def speak(tts: TextToSpeech) -> Callable[..., np.ndarray]:
    """Piper speaking ``text`` as 16 kHz float32, padded with silence like a real mic."""

    def _speak(text: str, silence_s: float = 1.0) -> np.ndarray:
        pcm = b"".join(chunk.pcm16 for chunk in tts.synthesize(text))
        speech = resample(pcm16_to_float(pcm), tts.config.output_rate, SPEECH_RATE)
        pad = np.zeros(int(silence_s * SPEECH_RATE), dtype=np.float32)
        return np.concatenate([pad, speech, pad])

    return _speak


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A warning fails a fast test: they run only our code and libraries that allow it (the
    slow ones drive Ray, vLLM and the frameworks, whose own warnings are not ours to fix)."""
    for item in items:
        if item.get_closest_marker("fast") is not None:
            item.add_marker(pytest.mark.filterwarnings("error"))

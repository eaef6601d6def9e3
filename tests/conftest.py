"""Shared fixtures: one real local Ray cluster and the real CPU speech models, each
started once per test session (they take seconds to start)."""

import os
import secrets
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from otlp_receiver import OTLPReceiver

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
def otlp_receiver() -> Iterator[OTLPReceiver]:
    """Where every app the suite serves sends its traces: they are on in every test, as an
    operator turns them on (``OTEL_EXPORTER_OTLP_ENDPOINT``, inherited by each Ray process),
    exported every 0.5 s rather than 5."""
    with OTLPReceiver() as receiver:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
        os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "500"
        yield receiver
        del os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"]


@pytest.fixture(scope="session")
def ray_local(otlp_receiver: OTLPReceiver) -> Iterator[None]:
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


TIERS = ("fast", "serve", "cluster", "models")
MODEL_FIXTURES = {"tts", "stt", "speak", "pcm24k", "vad", "llm", "realtime_url", "connect"}
"""Fixtures that load a real model, or serve the app on the real ones."""
RAY_FIXTURES = {"ray_local", "serve_port", "otlp_receiver"}


def tier_of(item: pytest.Item) -> str:
    """The one tier a test is marked with; an error if it has none, several, or one that its
    fixtures belie (a tier must be true for ``-m`` to be)."""
    tiers = {marker.name for marker in item.iter_markers()} & set(TIERS)
    if len(tiers) != 1:
        raise pytest.UsageError(f"{item.nodeid}: marked {sorted(tiers) or 'with no tier'}; mark it one of {TIERS}")
    (tier,) = tiers
    fixtures = set(getattr(item, "fixturenames", ()))
    if tier != "models" and fixtures & MODEL_FIXTURES:
        raise pytest.UsageError(f"{item.nodeid}: marked {tier} but uses {sorted(fixtures & MODEL_FIXTURES)}")
    if tier == "fast" and fixtures & RAY_FIXTURES:
        raise pytest.UsageError(f"{item.nodeid}: marked fast but uses {sorted(fixtures & RAY_FIXTURES)}")
    return tier


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test's tier is checked. A warning fails a fast test: they run only our code and
    libraries that allow it (the others drive Ray, vLLM and the frameworks, whose own warnings
    are not ours to fix)."""
    for item in items:
        if tier_of(item) == "fast":
            item.add_marker(pytest.mark.filterwarnings("error"))

"""The serving layer with synthetic engines, served beside the real app for the tests that need
many sessions or exact words (``handlers.synthetic``: questions, answers and hums are tones,
read back exactly)."""

from typing import Any

from ray import serve

from deployments.app import build_app


def serve_synthetic(serve_port: int, name: str, synthetic: dict[str, Any], vad_placement: str = "ingress") -> str:
    """Serves the real ingress, scopes and Serve plumbing with synthetic engines (questions,
    answers and hums are tones, read back exactly) beside the real app, at ``/name``, with
    the server's default turn-taking; returns its ``ws://`` base. ``serve.delete(name)`` ends it."""
    tiny = {"num_cpus": 0.01}
    config = {
        "synthetic": synthetic,
        "ingress": {
            "max_sessions": 100,
            "deployment": {**tiny, "max_ongoing_requests": 128},
            "scope": {"num_hosts": 2},
        },
        "vad": {"placement": vad_placement, "deployment": {**tiny, "max_ongoing_requests": 128}},
        "stt": {"deployment": {**tiny, "max_ongoing_requests": 128}},
        "llm": {"deployment": {**tiny, "max_ongoing_requests": 128}},
        "tts": {"deployment": {**tiny, "max_ongoing_requests": 64, "num_replicas": 2}},
    }
    serve.run(build_app(config), name=name, route_prefix=f"/{name}")
    return f"ws://127.0.0.1:{serve_port}/{name}"

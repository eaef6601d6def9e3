"""The application the model tests share: the local profile's defaults, with the few
settings the suite needs (``suite_config``)."""

from pathlib import Path
from typing import Any

from realtime_client import MAX_SESSIONS

RAMBLING = {"instructions": None, "answer_tokens": None}
"""The suite's sessions answer as the model rambles, not as the voice defaults keep it short:
its barge-in tests speak over answers that run for seconds after their first audio, which a
one-sentence answer sent unpaced does not (test_voice_defaults_served.py serves the defaults)."""
LLM = {"handler": {"max_tokens": 96}}
"""The cap those answers reach (the profiles' voice cap is shorter)."""


def suite_config(recordings_dir: Path, **ingress: Any) -> dict[str, Any]:
    """The suite's application: the local profile's defaults but for ``RAMBLING`` and these."""
    return {
        "ingress": {
            "max_sessions": MAX_SESSIONS,
            "deployment": {"num_cpus": 0.25, "max_ongoing_requests": 16},
            # Every session on one scope host: each worker's poll of it is shared by them all.
            "scope": {"num_hosts": 1},
            # Answers go out as made, not paced in real time (they last up to ~25 s each, and
            # the suite would wait for each); a test that paces them asks for it per session
            # (test_backchannels.py). The page paced has its tests on the synthetic engines
            # (test_voice_page_paced.py).
            "interruption": {"audio_lead_ms": None},
            "recording": {"directory": str(recordings_dir)},
            **RAMBLING,
            **ingress,
        },
        "llm": LLM,
    }

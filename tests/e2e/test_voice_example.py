"""The README's voice example against the served pipeline: a WAV question in, a spoken
answer out, as a newcomer runs it."""

import subprocess
import sys
import wave
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from handlers.audio import SPEECH_RATE, float_to_pcm16

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

EXAMPLE = Path(__file__).parents[2] / "examples" / "talk.py"


def test_a_spoken_question_in_a_wav_file_gets_a_spoken_answer(
    realtime_url: str, speak: Callable[..., np.ndarray], tmp_path: Path
) -> None:
    question = tmp_path / "question.wav"
    with wave.open(str(question), "wb") as wav:  # 16 kHz: the example resamples what it reads
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(SPEECH_RATE)
        wav.writeframes(float_to_pcm16(speak("What is the capital of France?", silence_s=0.3)))
    answer = tmp_path / "answer.wav"
    run = subprocess.run(
        [sys.executable, str(EXAMPLE), str(question), "--out", str(answer), "--url", realtime_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    heard = next(line for line in lines if line.startswith("you:"))
    assert "capital" in heard.lower() or "france" in heard.lower(), heard  # robust to a misheard word
    assert any(line.startswith("agent:") and len(line) > len("agent: ") for line in lines), run.stdout
    with wave.open(str(answer), "rb") as wav:
        assert wav.getframerate() == 24_000
        assert wav.getnframes() / 24_000 >= 0.5, "the answer is voiced"

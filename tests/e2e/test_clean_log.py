"""A clean log is a tested property: the normal paths of a session log no ERROR and no
traceback in the application's processes (anything at ERROR is a bug, or a failure the
client was told about; none happens here). The Ctrl-C path is in ``test_serve_local``."""

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray
from realtime_client import APP_NAME, LONG_QUESTION, is_done

from handlers.audio import REALTIME_RATE, float_to_pcm16

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""


class AppLogs:
    """What the application's processes (its replicas and their workers) log from now on."""

    def __init__(self) -> None:
        node = ray._private.worker._global_node  # the suite's own cluster
        self._dir = Path(node.get_logs_dir_path())
        self._offsets = {path: path.stat().st_size for path in self._files()}

    def _files(self) -> list[Path]:
        return [
            *self._dir.glob("worker-*.err"),
            *self._dir.glob("worker-*.out"),
            *self._dir.glob("serve/replica_*.log"),
        ]

    def new_lines(self) -> list[str]:
        """Lines written since, in the files of this application's processes."""
        lines = []
        for path in self._files():
            text = path.read_text(errors="replace")
            if f"{APP_NAME}_" not in text:
                continue  # another application's process (or Ray's own)
            lines += text[self._offsets.get(path, 0) :].splitlines()
        return lines


def noise(seconds: float) -> bytes:
    """A burst of white noise: no speech to the VAD, no words (or a word or two) to STT."""
    rng = np.random.default_rng(7)
    return float_to_pcm16((rng.standard_normal(int(seconds * REALTIME_RATE)) * 0.3).astype(np.float32))


async def test_normal_paths_log_no_error_and_no_traceback(
    connect: Callable[..., Any], pcm24k: Callable[..., bytes]
) -> None:
    logs = AppLogs()
    silence = bytes(REALTIME_RATE * 2 * 2)
    async with connect() as client:
        # A fresh spoken first turn (no instructions: nothing to prefill), then a barge-in.
        await client.send_audio(pcm24k(LONG_QUESTION))
        first = await client.until(lambda e: e.type == "response.output_audio.delta")
        await client.send_audio(pcm24k("What is the capital of France?"), realtime=True)
        await client.until(lambda e: is_done(e) and e.response.id == first.response_id)
        await client.until(is_done)
    async with connect() as client:
        # A quiet first turn: silence and noise (the VAD hears no speech in it), committed by
        # hand: a turn of no words, transcribed empty, with no response.
        await client.send_audio(silence + noise(0.8) + silence, realtime=False)
        await client.connection.input_audio_buffer.commit()
        quiet = await client.until(lambda e: e.type == "conversation.item.input_audio_transcription.completed")
        assert not client.of_type("response.created"), quiet
        # A response.cancel mid-answer.
        await client.connection.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": LONG_QUESTION}]}
        )
        await client.connection.response.create()
        answering = await client.until(lambda e: e.type == "response.output_audio.delta")
        await client.connection.response.cancel()
        await client.until(lambda e: is_done(e) and e.response.id == answering.response_id)
    async with connect() as client:
        # A client that leaves mid-answer.
        await client.send_audio(pcm24k(LONG_QUESTION))
        await client.until(lambda e: e.type == "response.output_audio.delta")
    async with connect() as client:
        # Every session above has ended on the server: its end is logged before this one starts.
        await client.send_audio(pcm24k("Thank you."))
        await client.until(is_done)
    await asyncio.sleep(1.0)  # the replicas' log lines reach their files (no event exists for it)
    bad = [line for line in logs.new_lines() if "Traceback" in line or " ERROR " in line or line.startswith("ERROR")]
    assert bad == [], "\n".join(bad[:40])

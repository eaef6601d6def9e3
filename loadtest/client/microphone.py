"""One session's microphone: what the load client says, sent at real-time pace.

A microphone carries one signal: of the voices being said at once (a barge-in may overlap the
last question's silence, a question a backchannel's), only the newest is sent; two voices'
frames in turn would be audio at twice real time, and a server would hear them as one garbled
utterance. The JSON text of each audio frame of a question is built once per process and
prompt, and frames go out on a deadline schedule (no drift).
"""

import base64
import functools
import json
import time
from typing import Any

from handlers.audio import REALTIME_RATE
from loadtest.client.prompts import Prompt
from loadtest.client.records import Turn
from loadtest.client.wire import running_metronome

FRAME_MS = 100
FRAME_BYTES = REALTIME_RATE * 2 * FRAME_MS // 1000
TRAILING_SILENCE_S = 1.0
"""Silence after each question: twice the server's default ``silence_duration_ms``."""


def _append_event(pcm: bytes) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})


SILENCE_EVENT = _append_event(bytes(FRAME_BYTES))
"""The ``input_audio_buffer.append`` of one frame of silence."""


@functools.lru_cache(maxsize=1024)
def spoken_frames(prompt: Prompt) -> tuple[tuple[str, float], ...]:
    """The question as it is sent: each frame's ``input_audio_buffer.append`` event (JSON text)
    and the seconds of audio from the question's start to that frame's end. Built once per
    process and prompt, whatever the number of sessions asking it."""
    audio = prompt.pcm16
    return tuple(
        (
            _append_event(audio[offset : offset + FRAME_BYTES]),
            min(offset + FRAME_BYTES, len(audio)) / (2 * REALTIME_RATE),
        )
        for offset in range(0, len(audio), FRAME_BYTES)
    )


class Microphone:
    """Says prompts over the session's connection (``ws``, set once it is open)."""

    def __init__(self) -> None:
        self.ws: Any = None
        self.sent_ms = 0.0
        """Input audio sent so far: the position the server's ``audio_end_ms`` names."""
        self._voices: list[object] = []
        """Voices being said right now, oldest first; only the last is sent."""

    async def say(self, prompt: Prompt, turn: Turn | None = None) -> None:
        """Send the prompt at microphone pace, then silence; note when the turn's speech
        ended. Each frame is due when the audio before it has played (from the start: no
        drift); while a newer voice is said, this one's frames go unsent."""
        metronome = running_metronome()
        start = time.monotonic()
        played = 0.0
        resumes = prompt.resumes_at_s
        voice = object()
        self._voices.append(voice)
        try:
            for event, frame_end in spoken_frames(prompt):
                if turn is not None and resumes is not None and played <= resumes < frame_end:
                    turn.resumed_at_ms = self.sent_ms + 1000 * (resumes - played)
                if self._voices[-1] is voice:
                    await self._append(event, frame_end - played)
                played = frame_end
                await metronome.until(start + played)
            if turn is not None:
                turn.speech_end_at = time.monotonic()
            for frame in range(1, int(TRAILING_SILENCE_S * 1000 / FRAME_MS) + 1):
                if self._voices[-1] is voice:
                    await self._append(SILENCE_EVENT, FRAME_MS / 1000)
                await metronome.until(start + played + frame * FRAME_MS / 1000)
        finally:
            self._voices.remove(voice)

    async def stream_silence(self) -> None:
        """The continuous microphone: a frame of silence every frame's length while no
        question is being spoken."""
        metronome = running_metronome()
        due = time.monotonic()
        while True:
            due += FRAME_MS / 1000
            await metronome.until(due)
            if not self._voices:
                await self._append(SILENCE_EVENT, FRAME_MS / 1000)

    async def _append(self, event: str, seconds: float) -> None:
        """Send an ``input_audio_buffer.append`` of ``seconds`` of audio, counted before the
        send, so concurrent speakers count it in the order it goes out."""
        self.sent_ms += 1000 * seconds
        await self.ws.send(event)

"""Talk to the voice agent: a WAV file in, the spoken answer out as a WAV file.

    .venv/bin/python examples/talk.py question.wav --out answer.wav

The question is streamed as a microphone would send it: 24 kHz PCM16 in 100 ms frames at
real-time pace, then silence, because the server's VAD ends a turn only after
``silence_duration_ms`` (500 ms by default) of it; a file sent whole and with no silence
after it never ends its turn. Any WAV works (16-bit PCM, any rate, mono or stereo): it is
mixed to mono and resampled to 24 kHz. Uses only the stock ``openai`` SDK.
"""

import argparse
import asyncio
import base64
import sys
import time
import wave
from pathlib import Path

import numpy as np
import soxr
from openai import AsyncOpenAI

RATE = 24_000
FRAME_MS = 100


def read_wav(path: Path) -> bytes:
    """The file as 24 kHz mono PCM16."""
    with wave.open(str(path), "rb") as wav:
        if wav.getsampwidth() != 2:
            raise SystemExit(f"{path}: only 16-bit PCM WAV files are read (this one has {8 * wav.getsampwidth()} bits)")
        samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").astype(np.float32) / 32768
        samples = samples.reshape(-1, wav.getnchannels()).mean(axis=1)
        rate = wav.getframerate()
    resampled = soxr.resample(samples, rate, RATE) if rate != RATE else samples
    return (np.clip(resampled, -1, 1) * 32767).astype("<i2").tobytes()


def write_wav(path: Path, pcm16: bytes) -> None:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes(pcm16)


async def talk(url: str, question: bytes, trailing_silence_s: float, timeout_s: float) -> tuple[str, str, bytes]:
    """Say ``question``; return what the server heard, what it answered, and its audio."""
    client = AsyncOpenAI(api_key="unused", websocket_base_url=url)
    frame = RATE * 2 * FRAME_MS // 1000
    audio = question + bytes(int(trailing_silence_s * RATE) * 2)
    heard, answer, spoken = "", "", bytearray()
    async with client.realtime.connect(model="s2s") as connection:

        async def stream() -> None:
            started = time.monotonic()
            for index, offset in enumerate(range(0, len(audio), frame)):
                chunk = base64.b64encode(audio[offset : offset + frame]).decode()
                await connection.input_audio_buffer.append(audio=chunk)
                await asyncio.sleep(max(0.0, started + (index + 1) * FRAME_MS / 1000 - time.monotonic()))

        sender = asyncio.create_task(stream())
        try:
            async with asyncio.timeout(timeout_s):
                async for event in connection:
                    if event.type == "conversation.item.input_audio_transcription.completed":
                        heard = event.transcript
                        print(f"you:   {heard}")
                        if not heard.strip():
                            break  # no words were heard: no answer follows
                    elif event.type == "response.output_audio.delta":
                        spoken += base64.b64decode(event.delta)
                    elif event.type == "response.output_audio_transcript.done":
                        answer = event.transcript
                        print(f"agent: {answer}")
                    elif event.type == "error":
                        print(f"error: {event.error.code}: {event.error.message}", file=sys.stderr)
                    elif event.type == "response.done":
                        if event.response.status != "completed":
                            raise SystemExit(f"the response ended {event.response.status}")
                        break
        finally:
            sender.cancel()
    return heard, answer, bytes(spoken)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wav", type=Path, help="the question, a 16-bit PCM WAV file")
    parser.add_argument("--out", type=Path, default=Path("answer.wav"), help="where the answer is written")
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1", help="the server (make run prints it)")
    parser.add_argument("--silence-s", type=float, default=1.5, help="silence streamed after the question")
    parser.add_argument("--timeout-s", type=float, default=60.0, help="how long to wait for the answer")
    args = parser.parse_args(argv)
    heard, _, spoken = asyncio.run(talk(args.url, read_wav(args.wav), args.silence_s, args.timeout_s))
    if not heard:
        print("the server heard no words in that audio, so there is no answer", file=sys.stderr)
    write_wav(args.out, spoken)
    print(f"{len(spoken) / (2 * RATE):.1f} s of answer written to {args.out}")


if __name__ == "__main__":
    main()

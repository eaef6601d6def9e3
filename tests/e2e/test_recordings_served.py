"""Recorded sessions on the real models, side by side on the same replicas: each recording
holds exactly its own caller's audio on the left and its own answers on the right, cut where
a barge-in cut them; its report tells the session's turns; an unrecorded session writes nothing."""

import asyncio
import base64
import json
import time
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from realtime_client import FINISHED, LONG_QUESTION, Client, assert_heard, audio_of, open_client, sessions_released

from handlers.audio import REALTIME_RATE

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

FRAME_BYTES = REALTIME_RATE * 2 // 10
"""What the microphone sends at a time: 100 ms."""
AUDIBLE = 200
"""A delta whose loudest sample is below this could be any answer's silence."""
REPORT_TIMEOUT_S = 30
SHORT_ANSWER_TOKENS = 30


class Microphone:
    """A caller's microphone: what it is given to say, else silence, in real time, 100 ms at
    a time, from the session's start to its end; keeps every byte it sent."""

    def __init__(self, client: Client) -> None:
        self.sent = bytearray()
        self._client = client
        self._to_say = bytearray()
        self._stopping = False
        self._frame_sent = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    def say(self, pcm: bytes) -> None:
        self._to_say += pcm

    async def _run(self) -> None:
        start = time.monotonic()
        while not self._stopping:
            chunk = bytes(self._to_say[:FRAME_BYTES]).ljust(FRAME_BYTES, b"\0")
            del self._to_say[:FRAME_BYTES]
            await self._client.connection.input_audio_buffer.append(audio=base64.b64encode(chunk).decode())
            self.sent += chunk
            self._frame_sent.set()
            # Pacing a live microphone on a fixed schedule, not synchronisation.
            await asyncio.sleep(max(0.0, start + len(self.sent) / FRAME_BYTES / 10 - time.monotonic()))

    async def until_sent(self, seconds: float) -> None:
        """Until the microphone has sent ``seconds`` of audio in all."""
        while len(self.sent) < seconds * REALTIME_RATE * 2:
            self._frame_sent.clear()
            await self._frame_sent.wait()

    async def listen_to(self, client: Client, response_id: str) -> None:
        """Go on sending silence while the caller hears the answer out: its audio was all sent
        by its ``response.done``, so it ends within its length of the audio sent by then."""
        await self.until_sent(len(self.sent) / (2 * REALTIME_RATE) + answer_s(client, response_id) + 0.5)

    async def stop(self) -> None:
        self._stopping = True
        await self._task


def answer_s(client: Client, response_id: str) -> float:
    return len(audio_of(client, response_id)) / (2 * REALTIME_RATE)


def audible_deltas(client: Client, response_id: str) -> list[bytes]:
    deltas = [base64.b64decode(e.delta) for e in client.of_type("response.output_audio.delta", response_id)]
    return [delta for delta in deltas if np.abs(np.frombuffer(delta, dtype="<i2")).max(initial=0) >= AUDIBLE]


def placed(right: bytes, deltas: list[bytes], start: int = 0) -> tuple[int, int]:
    """How many of ``deltas`` the right channel holds one after the other from ``start``, and
    where the last of them ends."""
    for count, delta in enumerate(deltas):
        at = right.find(delta, start)
        if at < 0:
            return count, start
        start = at + len(delta)
    return len(deltas), start


def session_id(client: Client) -> str:
    created = client.events[0]
    assert created.type == "session.created"
    return str(created.session.id)


async def asked(client: Client, mic: Microphone, question: bytes) -> str:
    """Say ``question``; the id of the response that answers it, once it is done."""
    mic.say(question)
    done = await client.until(lambda e: e.type == "response.done", timeout_s=120)
    assert done.response.status in FINISHED, "a short answer: capped by the client"
    return str(done.response.id)


async def short_answers(client: Client) -> None:
    """Answers from now on are short: the caller listens to each one out."""
    await client.connection.session.update(session={"type": "realtime", "max_output_tokens": SHORT_ANSWER_TOKENS})
    await client.until(lambda e: e.type == "session.updated")


async def conversation(client: Client, plan: Callable[[Client, Microphone], Any]) -> tuple[bytes, dict[str, Any]]:
    """Run ``plan`` with the microphone on; what the microphone sent, and what ``plan`` found."""
    mic = Microphone(client)
    try:
        found = await plan(client, mic)
    finally:
        await mic.stop()
    return bytes(mic.sent), found


async def recorded_files(directory: Path, session: str) -> tuple[dict[str, Any], bytes, bytes]:
    """The session's report and its recording's two channels, once the server has written them."""
    async with asyncio.timeout(REPORT_TIMEOUT_S):
        while not (reports := list(directory.glob(f"*-{session}.json"))):
            await asyncio.sleep(0.2)  # polling another process's files: no event reaches the test
    (report_path,) = reports
    report: dict[str, Any] = json.loads(report_path.read_text())
    with wave.open(str(directory / report["recording"]["file"])) as wav:
        assert (wav.getnchannels(), wav.getframerate()) == (2, REALTIME_RATE)
        stereo = np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").reshape(-1, 2)
    return report, stereo[:, 0].tobytes(), stereo[:, 1].tobytes()


async def test_recorded_sessions_hold_their_own_audio_and_report_and_an_unrecorded_one_writes_nothing(
    realtime_url: str, recordings_dir: Path, pcm24k: Callable[..., bytes]
) -> None:
    await sessions_released(realtime_url)
    questions = {"a": "What is the capital of France?", "c": "What colour is the sky?"}
    barge_in_question = "What is two plus two?"

    def plain(question: str) -> Callable[[Client, Microphone], Any]:
        async def plan(client: Client, mic: Microphone) -> dict[str, Any]:
            await short_answers(client)
            answer = await asked(client, mic, pcm24k(question, silence_s=0.2))
            await mic.listen_to(client, answer)
            return {"answers": [answer]}

        return plan

    async def interrupted(client: Client, mic: Microphone) -> dict[str, Any]:
        mic.say(pcm24k(LONG_QUESTION, silence_s=0.2))  # a long answer: still running when spoken over
        # Spoken over 2 s in: the 135M model's "long" answer can be under 4 s, and one spoken over
        # later had all played before the cut (all 37 of 37 deltas kept).
        first = await client.until(lambda e: e.type == "response.output_audio.delta", timeout_s=120)
        await client.until(lambda e: e.type == "response.done" or answer_s(client, first.response_id) >= 2.0)
        await short_answers(client)
        mic.say(pcm24k(barge_in_question, silence_s=0.2))  # over the answer, sent seconds ahead of playing
        cut = await client.until(lambda e: e.type == "response.done" and e.response.id == first.response_id)
        assert cut.response.status == "cancelled"
        answer = await asked(client, mic, b"")
        await mic.listen_to(client, answer)
        return {"answers": [first.response_id, answer]}

    async with (
        open_client(realtime_url, {"record": "true"}) as a,
        open_client(realtime_url, {"record": "true"}) as b,
        open_client(realtime_url) as c,
    ):
        ids = [session_id(client) for client in (a, b, c)]
        (sent_a, found_a), (sent_b, found_b), _ = await asyncio.gather(
            conversation(a, plain(questions["a"])), conversation(b, interrupted), conversation(c, plain(questions["c"]))
        )
    assert not a.of_type("error") and not b.of_type("error") and not c.of_type("error")

    deltas = {
        name: [chunk for response in found["answers"] for chunk in audible_deltas(client, response)]
        for name, client, found in (("a", a, found_a), ("b", b, found_b))
    }
    deltas["c"] = [chunk for e in c.of_type("response.done") for chunk in audible_deltas(c, e.response.id)]

    report_a, left_a, right_a = await recorded_files(recordings_dir, ids[0])
    report_b, left_b, right_b = await recorded_files(recordings_dir, ids[1])

    # The caller's channel is what its client sent, byte for byte, and sets the length.
    assert left_a == sent_a and left_b == sent_b
    assert report_a["recording"]["duration_s"] == len(sent_a) / (2 * REALTIME_RATE)
    assert not report_a["recording"]["truncated"] and not report_b["recording"]["truncated"]

    # The agent's channel: the session's own answers, in order; the cut one only as heard.
    (answer_a,) = found_a["answers"]
    assert placed(right_a, deltas["a"])[0] == len(deltas["a"]) > 0
    cut_id, answer_b = found_b["answers"]
    cut_deltas = audible_deltas(b, cut_id)
    kept, end = placed(right_b, cut_deltas)
    assert 0 < kept < len(cut_deltas), f"{kept} of the cut answer's {len(cut_deltas)} deltas recorded"
    assert placed(right_b, audible_deltas(b, answer_b), end)[0] == len(audible_deltas(b, answer_b))
    for right, others in ((right_a, deltas["b"] + deltas["c"]), (right_b, deltas["a"] + deltas["c"])):
        assert all(right.find(chunk) < 0 for chunk in others), "another session's answer in this recording"

    # The reports tell each session's turns.
    (turn_a,) = report_a["turns"]
    assert turn_a["status"] in FINISHED and not report_a["interruptions"]
    cut, answered = (turn["status"] for turn in report_b["turns"])
    assert cut == "cancelled" and answered in FINISHED
    (interruption,) = report_b["interruptions"]
    assert interruption["response_id"] == cut_id and interruption["cancelled"]
    users = [item for item in report_a["items"] if item.get("role") == "user"]
    assert_heard(questions["a"], users[0]["text"])
    transcript = a.of_type("response.output_audio_transcript.done", answer_a)[0].transcript
    assert report_a["turns"][0]["output"][0]["text"] == transcript
    assert report_a["models"]["llm"] == "SmolLM2-135M-Instruct" and report_a["models"]["tts"]

    # The unrecorded session wrote nothing.
    assert not [path for path in recordings_dir.iterdir() if ids[2] in path.name]

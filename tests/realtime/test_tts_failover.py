"""A TTS replica dying mid-answer, on fake stages: the piece is spoken again by another
replica, never twice and never in part; a cancel stops the retry; with no replica to take
over, the response fails visibly within the failover bound."""

import asyncio
import base64
import time
import zlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fakes import FakeStages, FakeStream, Gate, Harness
from ray.exceptions import ActorDiedError, ActorUnavailableError, RayTaskError
from ray.serve.exceptions import RequestCancelledError

from deployments.messages import StoppedAsStale, TTSRequest
from deployments.realtime.response import failover
from deployments.realtime.response.failover import replica_lost
from deployments.realtime.stages import StageFailure
from handlers.audio import REALTIME_RATE

CHUNK_MS = 300
CHUNKS = 2
"""Chunks (sentences) per piece: a replica can die between them."""


def chunk_of(text: str, index: int) -> bytes:
    """The audio of sentence ``index`` of ``text``: the same on every replica, unlike any other."""
    level = zlib.crc32(f"{index}:{text}".encode()) % 250 + 1
    return bytes([level]) * (REALTIME_RATE * 2 * CHUNK_MS // 1000)


class DyingStream(FakeStream):
    """Gives ``dies_after`` items, then fails as a stream whose replica died does."""

    def __init__(self, items: list[Any], gate: Gate, streams: list[FakeStream], dies_after: int, error: Exception):
        super().__init__(items[:dies_after], gate, streams)
        self.error = error

    async def _iterate(self) -> AsyncIterator[Any]:
        async for item in super()._iterate():
            yield item
        if not self.cancelled:
            raise self.error


class DyingStages(FakeStages):
    """Each session's TTS calls, counted from 0 (retries included), may be planned to die:
    ``deaths[session][call] = chunks given first``."""

    def __init__(self) -> None:
        super().__init__()
        self.tts_chunks = CHUNKS
        self.deaths: dict[str, dict[int, int]] = {}
        self.error: Exception = ActorDiedError()
        self.calls: dict[str, list[tuple[str, FakeStream]]] = {}

    def synthesize(self, request: TTSRequest) -> FakeStream:
        session = request.ticket.session_id
        calls = self.calls.setdefault(session, [])
        chunks = [chunk_of(request.text, i) for i in range(self.tts_chunks)]
        gate = self.session_tts_gates.get(session, self.tts_gate)
        dies_after = self.deaths.get(session, {}).get(len(calls))
        stream = (
            FakeStream(chunks, gate, self.tts_streams)
            if dies_after is None
            else DyingStream(chunks, gate, self.tts_streams, dies_after, self.error)
        )
        calls.append((request.text, stream))
        return stream


def pieces(h: Harness, response_id: str) -> list[str]:
    return [e["delta"].strip() for e in h.socket.of_type("response.output_audio_transcript.delta", response_id)]


def audio(h: Harness, response_id: str) -> bytes:
    return b"".join(base64.b64decode(e["delta"]) for e in h.socket.of_type("response.output_audio.delta", response_id))


def assert_whole(h: Harness, done: dict[str, Any]) -> None:
    """Completed, each piece's sentences once and in order, nothing else."""
    response = done["response"]
    assert response["status"] == "completed", response
    spoken = pieces(h, response["id"])
    assert " ".join(spoken) == response["output"][0]["content"][0]["transcript"] == "The answer is one. That is all."
    assert audio(h, response["id"]) == b"".join(chunk_of(p, i) for p in spoken for i in range(CHUNKS))
    assert h.socket.of_type("error") == []


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (ActorDiedError(), True),
        (ActorUnavailableError("unreachable", None), True),
        (RayTaskError("synthesize", "", StoppedAsStale("stale")).as_instanceof_cause(), False),
        (RayTaskError("synthesize", "", ActorDiedError()).as_instanceof_cause(), False),  # an upstream death
        (RayTaskError("synthesize", "", ValueError("bad text")).as_instanceof_cause(), False),
        (RequestCancelledError("req"), False),
        (RuntimeError("bug"), False),
        (StageFailure.timed_out("tts", 15), False),
    ],
)
def test_only_a_lost_replica_is_worth_a_retry(error: Exception, lost: bool) -> None:
    assert replica_lost(error) is lost
    try:
        raise StageFailure.failed("tts") from error  # as BoundedStages reports it
    except StageFailure as failure:
        assert replica_lost(failure) is lost


async def test_a_replica_dying_mid_piece_costs_no_words_and_no_other_session_notices() -> None:
    """Session a's second piece loses its replica after one of its two sentences: the piece
    is synthesised again, its first sentence skipped; session b, on the same replicas,
    answers as ever."""
    stages = DyingStages()
    stages.deaths["a"] = {1: 1}
    async with Harness(stages, name="a") as a, Harness(stages, name="b") as b:
        a.socket.client_sends(type="response.create")
        b.socket.client_sends(type="response.create")
        done_a, done_b = await asyncio.gather(a.socket.wait_type("response.done"), b.socket.wait_type("response.done"))
        assert_whole(a, done_a)
        assert_whole(b, done_b)
        texts = [text for text, _ in stages.calls["a"]]
        assert texts[1] == texts[2], "the dead replica's piece, and only it, is retried"
        assert len(texts) == len(pieces(a, done_a["response"]["id"])) + 1
        assert len(stages.calls["b"]) == len(pieces(b, done_b["response"]["id"]))
        assert stages.live_streams() == []


async def test_a_retry_that_lands_on_another_dead_replica_is_retried_again() -> None:
    stages = DyingStages()
    stages.deaths["a"] = {0: 0, 1: 0}  # the first piece, then its first retry, die at once
    stages.error = ActorUnavailableError("unreachable", None)
    async with Harness(stages, name="a") as a:
        a.socket.client_sends(type="response.create")
        assert_whole(a, await a.socket.wait_type("response.done"))
        assert [s.cancelled for _, s in stages.calls["a"][:2]] == [True, True]  # an unreachable one may live on


async def test_a_cancel_during_the_retry_stops_it_and_drops_everything_after() -> None:
    stages = DyingStages()
    stages.deaths["a"] = {1: 1}
    gate = stages.session_tts_gates["a"] = Gate()
    gate.close(after=CHUNKS + 1)  # the first piece, the dying piece's first sentence; the retry waits
    async with Harness(stages, name="a") as a:
        a.socket.client_sends(type="response.create")
        async with asyncio.timeout(5):
            while len(stages.calls.get("a", [])) < 3:
                await asyncio.sleep(0.01)
        sent = len(a.socket.of_type("response.output_audio.delta"))
        a.socket.client_sends(type="response.cancel")
        done = await a.socket.wait_type("response.done")
        assert done["response"]["status"] == "cancelled"
        _, retry = stages.calls["a"][2]
        assert retry.cancelled
        gate.open()
        await asyncio.sleep(0.1)
        assert len(a.socket.of_type("response.output_audio.delta")) == sent
        assert len(stages.calls["a"]) == 3, "no piece is synthesised after the cancel"
        assert a.socket.of_type("error") == []
        assert stages.live_streams() == []


async def test_no_replica_taking_over_fails_the_response_within_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """The only replica died (Serve is starting another): within the bound the client hears
    that the response failed, not seconds of silence; the session goes on."""
    monkeypatch.setattr(failover, "REPLICA_FAILOVER_S", 0.3)
    stages = DyingStages()
    stages.deaths["a"] = {1: 1}
    gate = stages.session_tts_gates["a"] = Gate()
    gate.close(after=CHUNKS + 1)
    async with Harness(stages, name="a") as a:
        a.socket.client_sends(type="response.create")
        async with asyncio.timeout(5):
            while len(stages.calls.get("a", [])) < 3:
                await asyncio.sleep(0.01)
        waiting_since = time.monotonic()
        done = await a.socket.wait_type("response.done")
        assert time.monotonic() - waiting_since < 1.0
        assert done["response"]["status"] == "failed"
        (error,) = a.socket.of_type("error")
        assert error["error"]["code"] == done["response"]["status_details"]["error"]["code"] == "tts_failed"
        assert error["error"]["message"].endswith("no replica took over within 0.3 s")
        assert stages.calls["a"][2][1].cancelled, "the retry waiting for a replica is withdrawn"
        gate.open()
        a.socket.client_sends(type="response.create")
        assert (await a.socket.wait_type("response.done", count=2))["response"]["status"] == "completed"


@pytest.mark.parametrize("error", [RuntimeError("the model failed"), StoppedAsStale("stale")])
async def test_a_failure_of_the_request_itself_is_not_retried(error: Exception) -> None:
    stages = DyingStages()
    stages.deaths["a"] = {1: 1}
    stages.error = error
    async with Harness(stages, name="a") as a:
        a.socket.client_sends(type="response.create")
        done = await a.socket.wait_type("response.done")
        assert done["response"]["status"] == "failed"
        assert a.socket.of_type("error")[0]["error"]["code"] == "tts_failed"
        assert len(stages.calls["a"]) == 2


async def test_a_piece_is_retried_at_most_twice() -> None:
    stages = DyingStages()
    stages.deaths["a"] = {1: 0, 2: 0, 3: 0}
    async with Harness(stages, name="a") as a:
        a.socket.client_sends(type="response.create")
        done = await a.socket.wait_type("response.done")
        assert done["response"]["status"] == "failed"
        assert a.socket.of_type("error")[0]["error"]["code"] == "tts_failed"
        assert len(stages.calls["a"]) == 2 + failover.MAX_RETRIES

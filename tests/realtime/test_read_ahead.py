"""Just-in-time speech on fake stages: the LLM is read ahead, the sentences ready together go
to the TTS in one call, a barge-in leaves the later ones unsynthesised, and an LLM failure
still comes after the words before it."""

from collections.abc import AsyncIterator
from typing import Any

from fakes import FakeStages, FakeStream, Gate, Harness

from deployments.messages import LLMRequest, TTSRequest

SENTENCES = [f"Part {i} of the answer. " for i in range(6)]
WHOLE = " ".join(s.strip() for s in SENTENCES)


class RecordingStages(FakeStages):
    """Records each session's TTS requests. The LLM's first sentence comes alone, the rest
    once the TTS has it, as a real LLM writes on while the first audio is made."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = list(SENTENCES)
        self.tts_chunk_ms = 1000
        self.requests: dict[str, list[TTSRequest]] = {}

    def generate(self, request: LLMRequest) -> FakeStream:
        self.session_llm_gates[request.ticket.session_id] = gate = Gate()
        gate.close(after=1)
        return super().generate(request)

    def synthesize(self, request: TTSRequest) -> FakeStream:
        self.requests.setdefault(request.ticket.session_id, []).append(request)
        if (gate := self.session_llm_gates.get(request.ticket.session_id)) is not None:
            gate.open()
        return super().synthesize(request)

    def spoken(self, session: str) -> str:
        return " ".join(" ".join(r.pieces) for r in self.requests[session])


async def test_a_barge_in_leaves_the_later_sentences_unsynthesised_and_other_sessions_whole() -> None:
    """Two sessions on the same stages, each piece waiting until the audio before it has
    played (``speech_lead_ms=0``). ``a`` is cancelled at its first audio: its TTS was asked
    for the first piece only. ``b`` hears every word, each synthesised once, in at most two
    calls (the first piece, then all the rest, ready together by then)."""
    stages = RecordingStages()
    async with Harness(stages, "a", speech_lead_ms=0) as a, Harness(stages, "b", speech_lead_ms=0) as b:
        a.socket.client_sends(type="response.create")
        b.socket.client_sends(type="response.create")
        await a.socket.wait_type("response.output_audio.delta")
        a.socket.client_sends(type="response.cancel")
        done_a, done_b = await a.socket.wait_type("response.done"), await b.socket.wait_type("response.done")
        assert done_a["response"]["status"] == "cancelled"
        assert [r.pieces for r in stages.requests["a"]] == [("Part 0 of", "the answer.")]
        assert all(s.cancelled or s.finished for s in stages.llm_streams)
        assert done_b["response"]["status"] == "completed"
        assert done_b["response"]["output"][0]["content"][0]["transcript"] == WHOLE == stages.spoken("b")
        assert len(stages.requests["b"]) <= 2
        assert stages.live_streams() == []


class FailingStream(FakeStream):
    """The LLM gives its items, then fails as a replica's error does."""

    async def _iterate(self) -> AsyncIterator[Any]:
        async for item in super()._iterate():
            yield item
        raise RuntimeError("the engine failed")


class FailingLLMStages(RecordingStages):
    def generate(self, request: LLMRequest) -> FakeStream:
        self.llm_requests.append(request)
        return FailingStream(["The first sentence is here. ", "And then"], self.llm_gate, self.llm_streams)


async def test_an_llm_failure_comes_after_the_words_it_gave_before() -> None:
    stages = FailingLLMStages()
    async with Harness(stages, "a") as a:
        a.socket.client_sends(type="response.create")
        done = await a.socket.wait_type("response.done")
        assert done["response"]["status"] == "failed"
        assert a.socket.of_type("error")[0]["error"]["code"] == "llm_failed"
        assert stages.spoken("a") == "The first sentence is here."
        assert len(a.socket.of_type("response.output_audio.delta")) > 0
        kinds = [e["type"] for e in a.socket.sent]
        assert kinds.index("error") > max(i for i, k in enumerate(kinds) if k == "response.output_audio.delta")

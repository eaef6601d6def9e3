"""LLM deltas coalesced for Serve: the first at once, the rest joined per interval, nothing
lost or reordered, and closing the coalesced stream closes the model's."""

import asyncio
from collections.abc import AsyncGenerator

from deployments.coalesce import coalesced
from handlers.tools import FunctionCallArguments, FunctionCallStarted, LLMOutput

END = object()


class Source:
    """A model stream the test feeds one output at a time."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[object] = asyncio.Queue()
        self.closed = False

    async def stream(self) -> AsyncGenerator[LLMOutput, None]:
        try:
            while (output := await self.queue.get()) is not END:
                yield output  # type: ignore[misc]
        finally:
            self.closed = True


async def test_first_delta_goes_at_once_and_later_ones_are_joined_in_order() -> None:
    source = Source()
    out = aiter(coalesced(source.stream(), interval_s=60))
    source.queue.put_nowait("Hello")
    assert await anext(out) == "Hello"  # not held back for the interval
    for output in [" there", ",", FunctionCallStarted(0, "call_1", "f"), FunctionCallArguments(0, '{"a"')]:
        source.queue.put_nowait(output)
    for output in [FunctionCallArguments(0, ": 1}"), FunctionCallArguments(1, "{}"), END]:
        source.queue.put_nowait(output)
    rest = [output async for output in out]
    assert rest == [
        " there,",
        FunctionCallStarted(0, "call_1", "f"),
        FunctionCallArguments(0, '{"a": 1}'),
        FunctionCallArguments(1, "{}"),
    ]


async def test_without_an_interval_every_delta_is_its_own_item() -> None:
    source = Source()
    for output in ["a", "b", "c", END]:
        source.queue.put_nowait(output)
    assert [output async for output in coalesced(source.stream(), interval_s=0)] == ["a", "b", "c"]


async def test_closing_the_coalesced_stream_closes_the_model_stream() -> None:
    """A cancelled answer must reach the model (vLLM aborts the request on close)."""
    source = Source()
    out = coalesced(source.stream(), interval_s=60)
    source.queue.put_nowait("Hello")
    assert await anext(out) == "Hello"
    await out.aclose()  # type: ignore[attr-defined]
    assert source.closed

"""LLM outputs coalesced for the trip over Serve.

Every item of a Serve stream is a Ray object: routing, pickling and a hop through the
replica's and the caller's event loops. One item per token costs more than the token at a
few hundred streams (Ray's own LLM serving batches its stream the same way). So after the
first output, which goes at once (it decides the time to first audio), outputs that arrive
within ``interval_s`` of the last item sent travel together: text joined, a call's argument
pieces joined, anything else in order. A model that pauses holds back at most what it made
since the last item, until its next output or its end.
"""

import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing

from handlers.tools import FunctionCallArguments, LLMOutput


async def coalesced(outputs: AsyncGenerator[LLMOutput, None], interval_s: float) -> AsyncIterator[LLMOutput]:
    pending: LLMOutput | None = None
    sent_at = float("-inf")
    async with aclosing(outputs) as stream:  # a cancel here reaches the model's stream at once
        async for output in stream:
            if pending is not None and (joined := _joined(pending, output)) is not None:
                pending = joined
            else:
                if pending is not None:
                    yield pending
                    sent_at = time.monotonic()
                pending = output
            if time.monotonic() - sent_at >= interval_s:
                yield pending
                sent_at, pending = time.monotonic(), None
    if pending is not None:
        yield pending


def _joined(first: LLMOutput, then: LLMOutput) -> LLMOutput | None:
    """One output saying both, where there is one."""
    if isinstance(first, str) and isinstance(then, str):
        return first + then
    if (
        isinstance(first, FunctionCallArguments)
        and isinstance(then, FunctionCallArguments)
        and first.index == then.index
    ):
        return FunctionCallArguments(first.index, first.delta + then.delta)
    return None

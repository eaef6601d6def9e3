"""The benches' client-lag figure: a stall is reported in the window it fell in, not outside."""

import asyncio
import time

import pytest

from loadtest.client.loop_lag import LoopLag

pytestmark = pytest.mark.fast

TICK_S = 0.01
STALL_S = 0.2


async def test_a_stall_is_reported_in_its_window_only() -> None:
    async with LoopLag(TICK_S) as lag:
        started = time.perf_counter()
        await asyncio.sleep(0.1)
        stalled = time.perf_counter()
        time.sleep(STALL_S)  # a callback that holds the loop, as a starved client does
        resumed = time.perf_counter()
        await asyncio.sleep(0.1)
        ended = time.perf_counter()
    assert lag.worst_ms(stalled, resumed) >= 0.75 * 1000 * STALL_S
    assert lag.worst_ms(started, stalled - 3 * TICK_S) < 0.5 * 1000 * STALL_S
    assert lag.worst_ms(resumed + 3 * TICK_S, ended) < 0.5 * 1000 * STALL_S
    assert max(lag.lags_s()) >= 0.75 * STALL_S


async def test_it_stops_sampling_when_left() -> None:
    async with LoopLag(TICK_S) as lag:
        await asyncio.sleep(0.05)
    taken = len(lag.lags_s())
    await asyncio.sleep(0.05)
    assert taken > 0 and len(lag.lags_s()) == taken

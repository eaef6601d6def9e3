"""The OpenAI Agents SDK's realtime runner, as its users write it, against the real stack
(local Ray, CPU models): its default session settings, a spoken turn, then a function-tool
round trip -- with zero ``error`` events from either side.

SmolLM2-135M never calls a tool under ``tool_choice: "auto"`` (measured: it answers in
words), so the round trip forces the first call by naming the function, and the tool hands
the choice back (``none``) so that the answer after it is spoken from its result -- as an
application does for a forced first step. The SDK's own flow is untouched: it runs the
tool, sends ``function_call_output`` and then ``response.create`` itself.

What the 135M model says varies between runs and machines (and so does what tiny.en hears of
the spoken questions), so the test asserts the protocol and the audio, not the answers'
content: each answer is non-empty and voiced, and the call's arguments are a JSON object that
fits the tool's schema.
"""

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from agents import RunContextWrapper, function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner, RealtimeSession
from agents.realtime.model_inputs import RealtimeModelSendSessionUpdate
from openai.types.responses.tool_choice_function import ToolChoiceFunction

from deployments.realtime.timeline import TIMINGS_KEY

pytestmark = pytest.mark.models
"""The real models: only ``make test`` runs these."""

TURN_TIMEOUT_S = 90
FRAME_BYTES = 24_000 * 2 // 10  # 100 ms of PCM16 at 24 kHz
SPOKEN_S_PER_WORD = 0.15
"""Less audio than this per word of an answer's transcript means words were never voiced."""


async def test_agents_sdk_speaks_and_completes_a_tool_round_trip(realtime_url: str, pcm24k, capsys) -> None:
    calls: list[str] = []
    sessions: list[RealtimeSession] = []

    @function_tool
    async def get_weather(context: RunContextWrapper[Any], city: str) -> str:
        """Get the current weather for a city.

        Args:
            city: The city, e.g. "Rome".
        """
        calls.append(city)
        await choose_tool(sessions[0], "none", [get_weather])
        return json.dumps({"city": city, "weather": "sunny", "temperature_celsius": 21})

    agent = RealtimeAgent(name="weather", instructions="You are a helpful voice assistant.", tools=[get_weather])
    runner = RealtimeRunner(agent)  # the SDK's default settings: semantic_vad, voice, transcription
    session = await runner.run(model_config={"url": f"{realtime_url}/realtime", "api_key": "unused"})
    sessions.append(session)
    log: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        async with session:
            await speak(session, pcm24k("What is the capital of France?"))
            await until(session, log, started, lambda e: e.type == "agent_end")
            first_turn = list(log)

            await choose_tool(session, ToolChoiceFunction(type="function", name="get_weather"), [get_weather])
            await speak(session, pcm24k("What is the weather in Paris?"))
            mark = len(log)
            # Two responses end: the call's and the answer from the result.
            await until(session, log, started, lambda e: e.type == "agent_end" and ends_since(log, mark) == 2)
    finally:
        with capsys.disabled():
            print("\nAgents SDK event log:\n" + "\n".join(json.dumps(e) for e in log))

    assert [e for e in log if e["type"] == "error" or e.get("server") == "error"] == []
    # Each response.done came with the turn's timings, and the SDK took them (no error above).
    ends = [e for e in log if e.get("server") == "response.done"]
    assert ends and all(e["timings"] and "first_token_ms" in e["timings"] for e in ends), ends
    assert_spoken(first_turn)
    round_trip = log[len(first_turn) :]
    kinds = [e["type"] for e in round_trip if e["type"] in ("agent_start", "tool_start", "tool_end", "agent_end")]
    # The SDK runs the tool in a task of its own (async_tool_calls), so its start may come
    # before or after the call's response ends; the answer's response starts after its result.
    assert [k for k in kinds if k.startswith("agent")] == ["agent_start", "agent_end"] * 2
    assert [k for k in kinds if k.startswith("tool")] == ["tool_start", "tool_end"]
    assert kinds.index("tool_start") > 0 and kinds.index("tool_end") < len(kinds) - 1 - kinds[::-1].index("agent_start")
    # Which city the model names is its own affair; the forced call fits the tool's schema.
    done_kind = "response.function_call_arguments.done"
    [sent] = [e["detail"]["arguments"] for e in round_trip if e.get("server") == done_kind]
    [started_with] = [e["arguments"] for e in round_trip if e["type"] == "tool_start"]
    assert started_with == sent and isinstance(json.loads(sent), dict), sent
    assert len(calls) == 1 and calls == [json.loads(sent)["city"]] and isinstance(calls[0], str), calls
    after_tool = round_trip[[e["type"] for e in round_trip].index("tool_end") :]
    assert_spoken(after_tool)  # the answer from the result


async def choose_tool(session: RealtimeSession, choice: Any, tools: list[Any]) -> None:
    """A session update through the SDK's model: it sends only the settings given, so the
    agent's tools go with the choice."""
    update = RealtimeModelSendSessionUpdate(session_settings={"tools": tools, "tool_choice": choice})
    await session.model.send_event(update)


async def speak(session: RealtimeSession, pcm: bytes) -> None:
    for offset in range(0, len(pcm), FRAME_BYTES):
        await session.send_audio(pcm[offset : offset + FRAME_BYTES])


async def until(
    session: RealtimeSession, log: list[dict[str, Any]], started: float, done: Callable[[Any], bool]
) -> None:
    """Log the session's events (and the raw server events under them) until ``done``."""
    async with asyncio.timeout(TURN_TIMEOUT_S):
        async for event in session:
            entry: dict[str, Any] = {"t": round(time.monotonic() - started, 2), "type": event.type}
            if event.type == "raw_model_event":
                data = getattr(event.data, "data", None)
                if not isinstance(data, dict) or data.get("type") == "response.output_audio.delta":
                    continue
                entry["server"] = data.get("type")
                if data["type"] in ("error", "response.done", "response.function_call_arguments.done"):
                    entry["detail"] = {k: data[k] for k in ("error", "arguments", "name") if k in data}
                    if data["type"] == "response.done":
                        metadata = data["response"].get("metadata") or {}
                        entry["detail"] = {"status": data["response"]["status"]}
                        entry["timings"] = json.loads(metadata[TIMINGS_KEY]) if TIMINGS_KEY in metadata else None
                if data["type"] == "response.output_audio_transcript.done":
                    entry["transcript"] = data["transcript"]
            elif event.type in ("tool_start", "tool_end"):
                entry["tool"] = event.tool.name
                entry["arguments"] = event.arguments
                if event.type == "tool_end":
                    entry["output"] = event.output
            elif event.type == "error":
                entry["error"] = repr(event.error)[:500]
            if event.type != "audio":
                log.append(entry)
            elif log and log[-1]["type"] == "audio":  # one entry per run of audio, its bytes summed
                log[-1]["bytes"] += len(event.audio.data)
            else:
                log.append(entry | {"bytes": len(event.audio.data)})
            if done(event):
                return


def ends_since(log: list[dict[str, Any]], mark: int) -> int:
    return sum(e["type"] == "agent_end" for e in log[mark:])


def transcripts(log: list[dict[str, Any]]) -> str:
    return " ".join(e["transcript"] for e in log if "transcript" in e)


def assert_spoken(turn: list[dict[str, Any]]) -> None:
    """An answer was said (whatever it says) and its words were voiced: PCM16 at 24 kHz."""
    words = len(transcripts(turn).split())
    seconds = sum(e["bytes"] for e in turn if e["type"] == "audio") / (2 * 24_000)
    assert words > 0, turn
    assert seconds >= SPOKEN_S_PER_WORD * words, f"{words} words in {seconds:.1f} s of audio"

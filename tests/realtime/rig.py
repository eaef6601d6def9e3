"""The response-side parts of a session, alone, on fake stages and a list-backed outbox.

No socket and no session: the rig builds the session's kit with the session's own
``build_kit``, a test builds the part it tests (a ``Responder``, a ``Speculator``, a sink)
from it and reads what the outbox sent.
"""

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any

from fakes import FakeScope, FakeStages, Gate
from openai import BaseModel as OpenAIModel
from openai.types.realtime import InputAudioBufferClearedEvent

from deployments.metrics import IngressMetrics, SessionMetrics
from deployments.realtime.kit import KitPorts, build_kit
from deployments.realtime.protocol import encode, server_event
from deployments.realtime.response.config import ResponseSettings
from deployments.realtime.response.responder import Responder
from deployments.realtime.session_config import SessionConfig
from deployments.realtime.settings import SessionSettings
from deployments.realtime.supervision import Supervisor
from deployments.realtime.transports.websocket import WebSocketAudio
from deployments.realtime.turn_taking.config import InterruptionRules

MARK = "input_audio_buffer.cleared"
"""A control event a test puts to know that everything before it has been sent."""


class Rig:
    def __init__(
        self, stages: FakeStages | None = None, capacity: int = 256, audio_delta_ms: int = 100, name: str = "rig"
    ) -> None:
        """``name``: the session's scope id (the stages' per-session gates and hooks)."""
        self.stages = stages or FakeStages()
        self.sent: list[dict[str, Any]] = []
        self.send_gate = Gate()
        self._arrived = asyncio.Event()
        self.supervisor = Supervisor("rig")
        config = SessionConfig(
            instructions=None,
            interruption=InterruptionRules(audio_lead_ms=None),  # answers go out as made, unpaced
            max_item_chars=1000,
            history_items=100,
            outgoing_events=capacity,
        )
        self.settings = SessionSettings.for_new_session(config, "fake")
        metrics = SessionMetrics(IngressMetrics())
        ports = KitPorts(self._send, WebSocketAudio(self._send))
        self.kit = build_kit(config, self.settings, self.stages, metrics, self.supervisor.spawn, ports)
        self.outbox, self.conversation, self.playback = self.kit.outbox, self.kit.conversation, self.kit.playback
        self.scope = FakeScope(name)
        self.responder = Responder(self.kit, self.scope, ResponseSettings(8, audio_delta_ms, None, None, None))
        self._task: asyncio.Task[None] | None = None

    async def _send(self, event: OpenAIModel) -> None:
        await self.send_gate.passage()
        self.sent.append(json.loads(encode(event)))
        self._arrived.set()

    async def __aenter__(self) -> "Rig":
        self._task = asyncio.ensure_future(self.supervisor.run(self.outbox.run()))
        await self.supervisor.running.wait()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def events(self) -> list[dict[str, Any]]:
        """What was sent, the test's marks left out."""
        return [event for event in self.sent if event["type"] != MARK]

    def types(self) -> list[str]:
        return [event["type"] for event in self.events()]

    async def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float = 5.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout_s):
            while True:
                for event in self.sent:
                    if predicate(event):
                        return event
                self._arrived.clear()
                await self._arrived.wait()

    async def wait_type(self, kind: str) -> dict[str, Any]:
        return await self.wait_for(lambda event: event["type"] == kind)

    async def drained(self, timeout_s: float = 5.0) -> list[dict[str, Any]]:
        """Everything sent once all that was queued so far has gone (a mark closes it)."""
        marks = self._marks()
        self.outbox.put(server_event(InputAudioBufferClearedEvent))
        async with asyncio.timeout(timeout_s):
            while self._marks() <= marks:
                self._arrived.clear()
                await self._arrived.wait()
        return self.events()

    def _marks(self) -> int:
        return sum(event["type"] == MARK for event in self.sent)

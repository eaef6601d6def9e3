"""The response-side parts of a session, alone, on fake stages and a list-backed outbox.

No socket and no session: a test builds the part it tests (a ``Responder``, a
``Speculator``, a sink) from these and reads what the outbox sent.
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
from deployments.realtime.conversation import Conversation
from deployments.realtime.outbox import Outbox
from deployments.realtime.playback import Playback
from deployments.realtime.protocol import encode, server_event
from deployments.realtime.response.responder import Responder, ResponseSettings
from deployments.realtime.settings import SessionSettings
from deployments.realtime.supervision import Supervisor
from deployments.realtime.transports.audio_out import CLEAR_AUDIO, WebSocketAudio
from handlers.vad import TurnDetection

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
        audio = WebSocketAudio(self._send)
        self.outbox = Outbox(self._send, audio, capacity)
        self.supervisor = Supervisor("rig")
        self.settings = SessionSettings(
            model_name="fake",
            instructions=None,
            defaults=TurnDetection(),
            turn_detection=TurnDetection(),
            max_instructions_chars=1000,
        )
        self.conversation = Conversation(100)
        self.scope = FakeScope(name)
        self.playback = Playback(audio, lambda: self.outbox.put(CLEAR_AUDIO))
        self.responder = Responder(
            stages=self.stages,
            scope=self.scope,
            outbox=self.outbox,
            conversation=self.conversation,
            settings=ResponseSettings(
                first_chunk_words=8,
                audio_delta_ms=audio_delta_ms,
                low_lead_ms=None,
                answer_tokens=None,
                prompt_budget_tokens=None,
            ),
            session=self.settings,
            metrics=SessionMetrics(IngressMetrics()),
            playback=self.playback,
            spawn=self.supervisor.spawn,
        )
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

"""A spoken answer's playout: its transcript and audio frames, sent in order from a task of
their own, each frame once the listener has room for it (``Playback.room``).

Pacing holds frames back, so the answer's next piece must not wait for this one's audio to
go out: the sink hands each piece here as the TTS makes it and goes on to synthesise the
next while at most ``READ_AHEAD_MS`` of audio waits here. The next sentence is then ready
before the listener runs out (no gap between sentences), and a cancel wastes little TTS
work. Unpaced, frames leave as soon as the outbox has room, as before.

Nothing leaves a playout after :meth:`Playout.stop`. The stale-audio guard rests on it: the
outbox drops a cancelled response's output only until it forgets the response
(``Outbox.forget``), which it does once the response's task has ended; that task stops its
playout before it ends (``Responder._run``), but the playout's own task may end after the
forget. So ``stop`` is final at once: the task is cancelled, and a cancelled task resumes
only with ``CancelledError`` (which ``_send`` never catches), so a frame on its way is not
sent; and whatever is given after ``stop`` is refused, so no task is started to send it.
"""

import asyncio
from collections import deque

from deployments.realtime.items import AssistantMessage
from deployments.realtime.outbox import Outbox
from deployments.realtime.playback import Playback
from deployments.realtime.response.events import ResponseEvents
from deployments.realtime.response.run import ResponseRun
from deployments.realtime.supervision import Spawn
from deployments.realtime.transports.wire_audio import audio_ms

READ_AHEAD_MS = 2000.0
"""Audio of the answer synthesised and waiting to be sent before its next piece is
synthesised: more than a sentence takes to synthesise on a loaded CPU."""


class Playout:
    def __init__(
        self, run: ResponseRun, events: ResponseEvents, outbox: Outbox, playback: Playback, spawn: Spawn
    ) -> None:
        """``spawn``: starts the sending task under the session's supervision (a bug there
        fails the session visibly, never hangs the answer)."""
        self._run, self._events, self._outbox, self._playback = run, events, outbox, playback
        self._spawn = spawn
        self._waiting: deque[str | bytes] = deque()
        """Transcript text and audio frames, in the order they go out."""
        self._waiting_ms = 0.0
        self.unsent_ms = 0.0
        """Audio given to the outbox (queued or held there) and not yet sent."""
        self._unsent = lambda: self.unsent_ms
        self._queued = asyncio.Event()
        self._taken = asyncio.Event()
        self._sending = False
        self._stopped = False
        self._task: asyncio.Task[None] | None = None

    def say(self, text: str) -> None:
        """A piece's transcript: it goes out just before the piece's audio."""
        self._put(text)

    def play(self, frame: bytes) -> None:
        self._waiting_ms += audio_ms(len(frame))
        self._put(frame)

    def ready_ms(self) -> float:
        """The answer's audio made and not yet heard: what plays before the next piece must."""
        return self._waiting_ms + self.unsent_ms + self._playback.ahead_ms()

    async def room(self) -> None:
        """Wait until no more than ``READ_AHEAD_MS`` of audio waits to be sent."""
        while self._waiting_ms > READ_AHEAD_MS:
            self._taken.clear()
            await self._taken.wait()

    async def played(self) -> None:
        """Wait until everything given so far has gone to the outbox."""
        while self._waiting or self._sending:
            self._taken.clear()
            await self._taken.wait()

    def stop(self) -> None:
        """The answer is over (done, failed or cancelled): nothing more is sent from here,
        from now on (the module's docstring says why it must be at once)."""
        self._stopped = True
        if self._task is not None:
            self._task.cancel()

    def _put(self, item: str | bytes) -> None:
        if self._stopped:  # its response may be forgotten: it would go out as stale audio
            return
        self._waiting.append(item)
        if self._task is None:
            self._task = self._spawn(self._send())
        self._queued.set()

    async def _send(self) -> None:
        answer = self._run.answer
        while True:
            while not self._waiting:
                self._queued.clear()
                await self._queued.wait()
            self._sending = True
            item = self._waiting.popleft()
            if isinstance(item, str):
                self._events.transcript_delta(item)
            else:
                await self._send_frame(item, answer)
            self._sending = False
            self._taken.set()

    async def _send_frame(self, frame: bytes, answer: AssistantMessage) -> None:
        sent = _AudioSent(self, answer, len(frame), self._playback)
        self._waiting_ms -= sent.ms
        self._taken.set()
        await self._outbox.room(self._run.id)
        self.unsent_ms += sent.ms
        await self._playback.room(self._unsent)
        self._events.audio(frame, sent)
        self._run.timeline.mark("first_audio")


class _AudioSent:
    """Counts one frame as sent, and heard from now (a callable object: cheaper than a
    closure per frame)."""

    __slots__ = ("_playout", "_answer", "ms", "_playback")

    def __init__(self, playout: Playout, answer: AssistantMessage, frame_bytes: int, playback: Playback) -> None:
        self._playout, self._answer, self.ms, self._playback = playout, answer, audio_ms(frame_bytes), playback

    def __call__(self) -> None:
        self._playout.unsent_ms -= self.ms
        self._answer.audio_ms += self.ms
        self._playback.sent(self.ms)

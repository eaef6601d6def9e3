"""What the listener hears of the answers, as far as the server can tell, and how far ahead
of it the answer's audio may be sent.

Interruption rules (``interruptions``) apply only while an answer is heard, so the session
keeps a listener's clock: every audio frame sent is heard after those before it, from the
moment it went out (a WebSocket client plays as audio arrives; a WebRTC track is paced in
real time by the server, so the same clock holds). An answer whose audio has begun is heard
until its ``response.done`` went out and the clock ran out: a silence between its sentences
(a slow TTS) is part of it, and a "mm-hmm" there is a backchannel too.

How the audio reaches the listener is the transport's (its :class:`AudioOut` port); this
class decides when. While the rules decide whether a sound interrupts, the answer pauses.
Where the server plays the audio (WebRTC) it pauses its track. Where the client plays what
it is sent (a WebSocket, Twilio), the answer's audio is sent at most ``lead_ms`` ahead of the
listener's clock
(:meth:`Playback.room`), so stopping the send pauses the client once it has played that
lead: the sound stops within it, and nothing is dropped. With no lead the audio goes out as
fast as it is made (OpenAI's way), and a WebSocket client hears the answer until it is told
to stop (``speech_started``).
"""

import asyncio
import time
from collections.abc import Callable

from deployments.realtime.transports.audio_out import AudioOut

HEARD_MARGIN_S = 0.25
"""A frame is still heard this long after the clock says it ended: a client's jitter
buffer and its audio device play a little behind what arrived."""
MAX_PAUSE_S = 1.5
"""Longest a pause lasts, then the answer plays on while the rules still decide: a decision
waits for more audio, and a client that sends audio only while its user speaks (push to
talk, a script) may send none, which must not hold the answer for ever."""
MIN_WAIT_MS = 10.0
"""The shortest wait for room: a held answer's audio (speculation) waits for its release
without waking more often than this."""


class Playback:
    def __init__(
        self,
        audio: AudioOut,
        clear: Callable[[], None],
        lead_ms: Callable[[], int | None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``audio``: the transport's port (where it plays the audio itself, it pauses;
        elsewhere the audio is paced by ``lead_ms()``, ``None``: not paced); ``clear()``:
        tells the port to stop, behind the events queued before."""
        self._audio = audio
        self._clear = clear
        self._lead_ms = lead_ms
        self._clock = clock
        self._heard_until = 0.0
        self._paused_at: float | None = None
        self._resumed = asyncio.Event()
        self._resumed.set()
        self._pause_limit: asyncio.TimerHandle | None = None
        self._answering = False

    def sent(self, ms: float) -> None:
        """A frame of ``ms`` of answer audio went to the client."""
        self._heard_until = max(self._heard_until, self._clock()) + ms / 1000
        self._answering = True

    def answer_over(self, response_id: str) -> None:
        """The answer's ``response.done`` went to the client: what is left of it is heard
        until the clock runs out."""
        self._answering = False
        self._audio.finished(response_id)

    def played_ms(self, response_id: str) -> float | None:
        """How much of the answer the caller has played, where the transport knows."""
        return self._audio.played_ms(response_id)

    def playing(self) -> bool:
        """Whether the listener hears an answer now (or would, but for a pause)."""
        if self._answering or self._paused_at is not None:
            return True
        return self._clock() < self._heard_until + HEARD_MARGIN_S

    def stopped(self) -> None:
        """The client stops playing (a barge-in, a cancel, a truncate): nothing is heard now,
        and the transport clears what it was sent once the events queued before are out."""
        self._clear()
        self._heard_until = 0.0
        self._paused_at = None
        self._resumed.set()
        self._end_pause_limit()
        self._answering = False

    def pause(self) -> None:
        if self._paused_at is not None:
            return
        if self._audio.plays_itself:
            self._audio.pause(True)
        elif self._lead_ms() is None:
            return  # sent as made: the client has it all, nothing can pause
        self._paused_at = self._clock()
        self._resumed.clear()
        self._pause_limit = asyncio.get_running_loop().call_later(MAX_PAUSE_S, self.resume)

    def resume(self) -> None:
        """Playback goes on where it paused. The server's own playback stood still, so what
        was left takes as much longer to play; a paced client played on through its lead."""
        if self._paused_at is None:
            return
        if self._audio.plays_itself:
            self._heard_until += self._clock() - self._paused_at
            self._audio.pause(False)
        self._paused_at = None
        self._resumed.set()
        self._end_pause_limit()

    def _end_pause_limit(self) -> None:
        if self._pause_limit is not None:
            self._pause_limit.cancel()
            self._pause_limit = None

    def ahead_ms(self) -> float:
        """Audio sent that the listener has yet to hear, by the clock."""
        return max(self._heard_until - self._clock(), 0.0) * 1000

    async def room(self, unsent_ms: Callable[[], float]) -> None:
        """Wait until the answer's next frame may go out: at once unless the client plays
        the audio and it is paced; then never while paused, and only once what the client
        has yet to play plus ``unsent_ms()`` (the answer's audio queued or held, this frame
        included) is within the lead."""
        while not self._audio.plays_itself and (lead_ms := self._lead_ms()) is not None:
            if self._paused_at is not None:
                await self._resumed.wait()
                continue
            ahead_ms = self.ahead_ms() + unsent_ms()
            if ahead_ms <= lead_ms:
                return
            await asyncio.sleep(max(ahead_ms - lead_ms, MIN_WAIT_MS) / 1000)

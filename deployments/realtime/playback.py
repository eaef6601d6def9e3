"""What the listener hears of the answers, as far as the server can tell.

Interruption rules (``interruptions``) apply only while an answer is heard, so the session
keeps a listener's clock: every audio frame sent is heard after those before it, from the
moment it went out (a WebSocket client plays as audio arrives; a WebRTC track is paced in
real time by the server, so the same clock holds). An answer whose audio has begun is heard
until its ``response.done`` went out and the clock ran out: a silence between its sentences
(a slow TTS) is part of it, and a "mm-hmm" there is a backchannel too. Where the server plays the
audio itself (WebRTC) it can also pause it while it decides whether a sound interrupts.
"""

import time
from collections.abc import Callable

HEARD_MARGIN_S = 0.25
"""A frame is still heard this long after the clock says it ended: a client's jitter
buffer and its audio device play a little behind what arrived."""


class Playback:
    def __init__(self, pause_output: Callable[[bool], bool], clock: Callable[[], float] = time.monotonic) -> None:
        """``pause_output(paused)``: pause or resume the server's playback; ``False`` when
        the client plays the audio itself (a WebSocket), so nothing pauses."""
        self._pause_output = pause_output
        self._clock = clock
        self._heard_until = 0.0
        self._paused_at: float | None = None
        self._answering = False

    def sent(self, ms: float) -> None:
        """A frame of ``ms`` of answer audio went to the client."""
        self._heard_until = max(self._heard_until, self._clock()) + ms / 1000
        self._answering = True

    def answer_over(self) -> None:
        """The answer's ``response.done`` went to the client: what is left of it is heard
        until the clock runs out."""
        self._answering = False

    def playing(self) -> bool:
        """Whether the listener hears an answer now (or would, but for a pause)."""
        if self._answering or self._paused_at is not None:
            return True
        return self._clock() < self._heard_until + HEARD_MARGIN_S

    def stopped(self) -> None:
        """The client stopped playing (a barge-in, a truncate): nothing is heard now. The
        server's own playback is cleared by the events that say so, not here."""
        self._heard_until = 0.0
        self._paused_at = None
        self._answering = False

    def pause(self) -> None:
        if self._paused_at is None and self._pause_output(True):
            self._paused_at = self._clock()

    def resume(self) -> None:
        """Playback goes on where it paused; what was left takes as much longer to play."""
        if self._paused_at is not None:
            self._heard_until += self._clock() - self._paused_at
            self._paused_at = None
            self._pause_output(False)

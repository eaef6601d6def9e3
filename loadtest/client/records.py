"""The records of what a load-test session heard: each turn, its response, stale audio, resumes.

Stale audio is filed by kind, per response (:class:`StaleAudio`): audio of a response after its
own ``response.done``, or of a response the session never saw created, with the events that
came just before its first stale delta, so a report can say which failure it was and where.
"""

import asyncio
from dataclasses import dataclass, field
from typing import Literal

from loadtest.client.prompts import Prompt

Interruption = Literal["barge-in", "cancel", "backchannel"] | None
StaleKind = Literal["after_done", "never_created"]
EVENTS_KEPT = 12
TIMINGS_KEY = "turn_timings"
"""The ``response.metadata`` key of the turn's timings (the server's
``deployments.realtime.timeline.TIMINGS_KEY``: a test checks they agree)."""
"""How many of the latest events a stale response's record keeps (the order around it)."""


@dataclass
class Response:
    id: str
    created_at: float
    first_audio_at: float | None = None
    last_audio_at: float | None = None
    audio_bytes: int = 0
    plays_until: float = 0.0
    """When a client playing the audio as it came would have played all of it so far."""
    longest_gap_s: float = 0.0
    """The longest silence such a client heard between the answer's first and last audio."""
    transcript: str = ""
    done_at: float | None = None
    status: str | None = None
    server_timings: dict[str, float] = field(default_factory=dict)
    """The turn's timings as its ``response.done`` told them (ms from the end of speech)."""
    done: asyncio.Event = field(default_factory=asyncio.Event)
    first_audio: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class StaleAudio:
    """Audio of one response that the client must never have got."""

    kind: StaleKind
    """``after_done``: after the response's own ``response.done``; ``never_created``: of a
    response whose ``response.created`` never came."""
    response_id: str
    bytes: int = 0
    deltas: int = 0
    at: float = 0.0
    """When its first stale delta was read (``time.monotonic()``)."""
    events_before: list[str] = field(default_factory=list)
    """The session's events up to its first stale delta, oldest first (``type response_id``)."""


@dataclass
class Turn:
    """One question and what the server did with it; times are ``time.monotonic()``."""

    session: int
    index: int
    prompt: Prompt
    speech_end_at: float | None = None
    speech_stopped_at: float | None = None
    transcribed_at: float | None = None
    heard: str | None = None
    response: Response | None = None
    interruption: Interruption = None
    interrupted_at: float | None = None
    """When the interrupting speech (or the backchannel) began to be sent, or
    ``response.cancel`` was sent."""
    barge_in_heard_at: float | None = None
    """When the server said ``speech_started`` for the interrupting speech."""
    timed_out: bool = False
    paused: bool = False
    """Spoken with a pause mid-sentence (``PromptSet.paused``)."""
    resumed_at_ms: float | None = None
    """Where in the session's input audio a paused question's speech went on: the server's
    ``speech_stopped`` before it (its ``audio_end_ms``) was at the pause."""
    cut_off_by: list[Response] = field(default_factory=list)
    """Responses the server began after a stop at the turn's pause: it took the pause for the
    turn's end. The turn's own response is the one after a stop past it."""
    answered: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Resume:
    """One connection a session lost (or left, told of a drain) and its resume."""

    reason: str
    """The close code, or ``draining`` (the client left at a turn's end, told to)."""
    lost_at: float
    items_before: list[str]
    """The items the client had seen finished (``conversation.item.done``), oldest first."""
    told: bool = False
    """The server had said ``session.draining`` on the lost connection before it ended."""
    resumed_at: float | None = None
    """When the resumed session's ``session.created`` came (``None``: never resumed)."""
    refusals: list[str] = field(default_factory=list)
    """Why each failed attempt failed (an HTTP status, a close code, an exception's name)."""
    items_replayed: list[str] = field(default_factory=list)

    @property
    def items_lost(self) -> int:
        """Items the client saw finished that the resumed session did not replay, counted
        from the oldest one it did (the server keeps only its latest ``history_items``)."""
        if self.resumed_at is None:
            return 0
        replayed = set(self.items_replayed)
        start = next((i for i, item in enumerate(self.items_before) if item in replayed), 0)
        return sum(item not in replayed for item in self.items_before[start:])


@dataclass
class SessionLog:
    """Everything one session saw."""

    index: int
    turns: list[Turn] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    done_without_created: int = 0
    unasked_responses: int = 0
    """Responses to no question of the session: a backchannel taken for a turn."""
    stale: dict[str, StaleAudio] = field(default_factory=dict)
    """Stale audio by response id."""
    disconnected: bool = False
    """Its last connection was lost, and not resumed."""
    model: str | None = None
    resumes: list[Resume] = field(default_factory=list)
    finished_items: list[str] = field(default_factory=list)
    """Items the client saw finished, on every connection, oldest first."""

    @property
    def stale_bytes(self) -> int:
        return sum(stale.bytes for stale in self.stale.values())

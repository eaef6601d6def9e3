"""Sessions' records outside the ingress replicas, so that a client that lost its socket
resumes its session on any replica (issue 40).

The ``ray`` store is one named, detached actor per application (:class:`SessionRecords`),
on the ingress's nodes: it outlives every ingress replica (a redeploy, a scale-down, a killed
replica) but not the Ray cluster. Ray restarts it if it dies (its node lost), empty: each
open session writes its whole record again at its next change, or at the next renewal,
which names the records the store lacks; a resume before that is refused like an expired
token, and a session whose socket had closed before the loss cannot be resumed.

Resume tokens are ``<session id>.<secret>``: the store keeps only the secret's SHA-256 (and
the API key's, when the server has one) and compares them in constant time. A resume
rotates the secret and raises the record's *epoch*: a token opens one connection, and the
connection that held the record before (its socket half-open on some replica) has its next
write refused and is closed, so it can never overwrite the resumed conversation.

Records expire ``resume_window_s`` after the last sign that their session was alive: a
write, or the renewal that each ingress replica sends for its open sessions every quarter
window.
"""

import asyncio
import functools
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

import ray
from pydantic import BaseModel, ConfigDict, Field
from ray.actor import ActorHandle

from cancel import spawn_detached
from deployments.realtime.protocol import new_id
from deployments.realtime.recorder import EMPTY_STATE, StoredSession
from deployments.realtime.session_record import SessionState

logger = logging.getLogger(__name__)

TOKEN_SECRET_BYTES = 32
EXPIRY_SWEEP_S = 1.0


class SessionStoreConfig(BaseModel):
    """Where sessions' records live, so that a dropped client can resume (``none``: nowhere,
    and no ``resume_token`` is given)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["ray", "none"] = "ray"
    resume_window_s: float = Field(300.0, gt=0)
    """How long a record outlives its session's last sign of life. Five minutes covers a
    phone changing networks, a laptop waking, and a drained call's client reconnecting,
    while a store of 120 sessions a replica holds only minutes of ended calls."""


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


@dataclass(frozen=True)
class ResumeToken:
    session_id: str
    secret: str

    @classmethod
    def new(cls, session_id: str) -> "ResumeToken":
        return cls(session_id, secrets.token_urlsafe(TOKEN_SECRET_BYTES))

    @classmethod
    def parse(cls, text: str) -> "ResumeToken | None":
        """The token ``text`` is, if it has a token's shape (nothing is looked up)."""
        session_id, dot, secret = text.partition(".")
        if not dot or not session_id.startswith("sess_") or len(text) > 200 or not secret:
            return None
        return cls(session_id, secret)

    def __str__(self) -> str:
        return f"{self.session_id}.{self.secret}"


@dataclass
class _Record:
    secret_digest: bytes
    key_digest: bytes | None
    state: SessionState
    epoch: int
    expires_at: float


class SessionRecords:
    """The records and their rules (the ``ray`` store's actor; plain Python, so the rules
    can be tested without Ray). Times are ``clock``'s: this process's monotonic clock."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_s
        self._clock = clock
        self._records: dict[str, _Record] = {}
        self._swept_at = clock()

    def open(self, session_id: str, secret_digest: bytes, key_digest: bytes | None, state: SessionState) -> None:
        """A new session's record (epoch 0)."""
        self._sweep()
        self._records[session_id] = _Record(secret_digest, key_digest, state, 0, self._expiry())

    def save(
        self, session_id: str, epoch: int, state: SessionState, secret_digest: bytes, key_digest: bytes | None
    ) -> bool:
        """The state of an open session, whose token's secret is ``secret_digest``; ``False``
        (nothing kept) if its record was resumed since (a newer epoch holds it). A record
        this store lacks (it restarted empty) is made again from the write; one an older
        epoch made again is taken over."""
        record = self._live(session_id)
        if record is not None and record.epoch > epoch:
            return False
        if record is None or record.epoch < epoch:
            record = self._records[session_id] = _Record(secret_digest, key_digest, state, epoch, 0.0)
        record.state, record.expires_at = state, self._expiry()
        return True

    def renew(self, session_ids: list[str]) -> list[str]:
        """These sessions are still open: their records live on. Returns those it has no
        record of (it restarted empty since), for their sessions to write them again."""
        expiry = self._expiry()
        lacking = []
        for session_id in session_ids:
            if (record := self._live(session_id)) is not None:
                record.expires_at = expiry
            else:
                lacking.append(session_id)
        return lacking

    def resume(
        self, session_id: str, secret_digest: bytes, key_digest: bytes | None, new_secret_digest: bytes
    ) -> tuple[int, SessionState] | None:
        """The session's epoch and state for a new connection, whose token is now
        ``new_secret_digest``; ``None`` for a wrong, expired, used or foreign token."""
        record = self._live(session_id)
        if record is None:
            return None
        # Both digests are always compared: the time taken says nothing of which was wrong.
        secret_ok = hmac.compare_digest(secret_digest, record.secret_digest)
        key_ok = hmac.compare_digest(key_digest or b"", record.key_digest or b"")
        if not (secret_ok and key_ok):
            return None
        record.secret_digest, record.epoch, record.expires_at = new_secret_digest, record.epoch + 1, self._expiry()
        return record.epoch, record.state

    def _live(self, session_id: str) -> _Record | None:
        """The session's record, unless it has expired (expired ones are swept now and then)."""
        self._sweep()
        record = self._records.get(session_id)
        return record if record is not None and record.expires_at > self._clock() else None

    def _expiry(self) -> float:
        return self._clock() + self._window_s

    def _sweep(self) -> None:
        now = self._clock()
        if now - self._swept_at < EXPIRY_SWEEP_S:
            return
        self._swept_at = now
        for session_id in [s for s, record in self._records.items() if record.expires_at <= now]:
            del self._records[session_id]


class SessionStore:
    """The ingress's side of the ``ray`` store. Writes and renewals run in detached tasks
    (Serve's cancel of the request that happened to start one must not cancel it); a
    session's opening and resume are awaited by its own handshake."""

    def __init__(self, records: ActorHandle, window_s: float, key: bytes | None) -> None:
        self._records = records
        self._window_s = window_s
        self._key_digest = hashlib.sha256(key).digest() if key is not None else None
        self._open: dict[str, Callable[[], None]] = {}
        """Open sessions, each with what writes its whole record again."""
        self._renewal: asyncio.Task[None] | None = None

    @classmethod
    def for_app(
        cls, app_name: str, config: SessionStoreConfig, key: bytes | None, label_selector: dict[str, str] | None
    ) -> "SessionStore":
        """The application's store actor, started by whichever replica asks first, on a node
        with the ingress's ``label_selector``: on a GPU pod it would go down with that pod."""
        placement = {} if label_selector is None else {"label_selector": label_selector}
        options = ray.remote(SessionRecords).options(
            name=f"s2s-sessions-{app_name}",
            namespace="s2s",
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_restarts=-1,
            max_task_retries=-1,
            **placement,
        )
        return cls(cast(ActorHandle, options.remote(config.resume_window_s)), config.resume_window_s, key)

    async def new_session(self) -> StoredSession:
        """A new session, its record kept from now on."""
        token = ResumeToken.new(new_id("sess"))
        await self._records.open.remote(token.session_id, digest(token.secret), self._key_digest, EMPTY_STATE)
        return self._stored(token, 0)

    async def resumed_session(self, token_text: str) -> StoredSession | None:
        """The session ``token_text`` resumes, with a new token; ``None`` for a token that
        is malformed, wrong, expired, used or foreign (all look the same to the client)."""
        token = ResumeToken.parse(token_text)
        if token is None:
            return None
        rotated = ResumeToken.new(token.session_id)
        found = await self._records.resume.remote(
            token.session_id, digest(token.secret), self._key_digest, digest(rotated.secret)
        )
        if found is None:
            return None
        epoch, state = found
        return self._stored(rotated, epoch, state)

    def _stored(self, token: ResumeToken, epoch: int, state: SessionState | None = None) -> StoredSession:
        session_id = token.session_id
        self._open[session_id] = lambda: None
        if self._renewal is None or self._renewal.done():
            self._renewal = spawn_detached(self._renew_open())
        save = functools.partial(self._save, token, epoch)
        return StoredSession(session_id, str(token), save, functools.partial(self._rewrite_with, session_id), state)

    async def _save(self, token: ResumeToken, epoch: int, state: SessionState) -> bool:
        """Keep the session's state (called from a detached task); ``False``: resumed elsewhere."""
        kept = await self._records.save.remote(token.session_id, epoch, state, digest(token.secret), self._key_digest)
        return bool(kept)

    def _rewrite_with(self, session_id: str, rewrite: Callable[[], None]) -> None:
        if session_id in self._open:
            self._open[session_id] = rewrite

    def closed(self, session_id: str) -> None:
        """The session's socket is gone: its record lives ``resume_window_s`` from now."""
        self._open.pop(session_id, None)
        spawn_detached(self._renew([session_id]))

    async def _renew_open(self) -> None:
        while self._open:
            await asyncio.sleep(self._window_s / 4)
            await self._renew(list(self._open))

    async def _renew(self, session_ids: list[str]) -> None:
        try:
            lacking = await self._records.renew.remote(session_ids)
        except Exception:  # the next renewal tries again, a quarter window later
            logger.warning("could not renew %d session records", len(session_ids), exc_info=True)
            return
        if lacking:
            logger.warning("the session store lacked %d open sessions' records: writing them again", len(lacking))
        for session_id in lacking:
            self._open.get(session_id, lambda: None)()

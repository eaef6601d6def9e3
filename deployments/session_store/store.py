"""Sessions' records outside the ingress replicas, so that a client that lost its socket
resumes its session on any replica (``docs/reliability.md``).

Where the records live is the config's ``kind``: ``ray`` (:mod:`deployments.session_store.ray_records`),
one detached actor per application, which outlives every ingress replica but not the Ray
cluster; ``redis`` (:mod:`deployments.session_store.redis_records`), a Redis server, which outlives the
Ray cluster too (a KubeRay ``NewCluster`` upgrade); ``none``, nowhere. Both keep the same
rules, tested on both.

Resume tokens are ``<session id>.<secret>``: the store keeps only the secret's keyed digest
(and the API key's, for a session opened with it: :mod:`deployments.keyed_digests`) and
compares them in constant time. A session opened with an ephemeral client secret resumes
with its token alone: the secret may have expired by then, and the token is as strong. A resume
rotates the secret and raises the record's *epoch*: a token opens one connection, and the
connection that held the record before (its socket half-open on some replica) has its next
write refused and is closed, so it can never overwrite the resumed conversation.

Records expire ``resume_window_s`` after the last sign that their session was alive: a
write, or the renewal that each ingress replica sends for its open sessions every quarter
window.
"""

import asyncio
import contextlib
import functools
import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from cancel import spawn_detached
from deployments.client_secrets import ClientSecrets, SecretRecords
from deployments.keyed_digests import KeyedDigests
from deployments.realtime.protocol import new_id
from deployments.session_store.config import SessionStoreConfig
from deployments.session_store.ray_records import RecordWrite, ReplicaSecrets, ray_records
from deployments.session_store.record import SessionState
from deployments.session_store.redis_records import RedisRecords
from deployments.session_store.writer import EMPTY_STATE, StoredSession

logger = logging.getLogger(__name__)

TOKEN_SECRET_BYTES = 32
WRITE_INTERVAL_S = 0.1
"""A replica's sessions' writes go to the store together: one call in flight, and at most
one call per this long. At 120 sessions that is ~10 calls a second, not one per finished
item (each call's fixed cost was most of the store's CPU: docs/bench/notes/session-store.md); a lost replica
may lose this much more of its sessions' last changes."""


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


class Records(SecretRecords, Protocol):
    """What keeps the records, by the rules of :class:`deployments.session_store.ray_records.SessionRecords`."""

    async def open(
        self, session_id: str, secret_digest: bytes, key_digest: bytes | None, state: SessionState
    ) -> None: ...

    async def save_many(self, writes: list[RecordWrite]) -> list[bool]: ...

    async def renew(self, session_ids: list[str]) -> list[str]: ...

    async def resume(
        self, session_id: str, secret_digest: bytes, key_digest: bytes | None, new_secret_digest: bytes
    ) -> tuple[int, SessionState] | None: ...


class SessionStore:
    """The ingress's side of the store. Writes and renewals run in detached tasks (Serve's
    cancel of the request that happened to start one must not cancel it); a session's
    opening and resume are awaited by its own handshake."""

    def __init__(self, records: Records, window_s: float, digests: KeyedDigests, key: bytes | None) -> None:
        """``key``: the server's API key (``None``: none), bound to the sessions opened with it."""
        self._records = records
        self._window_s = window_s
        self._digests = digests
        self._key = key
        self._open: dict[str, Callable[[], None]] = {}
        """Open sessions, each with what writes its whole record again."""
        self._handed_back: dict[str, tuple[ResumeToken, ResumeToken]] = {}
        """Resumed sessions not yet started: (the token they came with, the new one)."""
        self._renewal: asyncio.Task[None] | None = None
        self._writes: dict[str, tuple[RecordWrite, asyncio.Future[bool]]] = {}
        """Writes waiting for the next call, by session (each session has one at a time)."""
        self._writer: asyncio.Task[None] | None = None

    @classmethod
    def for_app(
        cls, app_name: str, config: SessionStoreConfig, key: bytes | None, label_selector: dict[str, str] | None
    ) -> "tuple[SessionStore | None, ClientSecrets]":
        """The application's store of the configured kind (``None`` for ``none``), and the
        client secrets kept beside its records (in this replica without one)."""
        if config.kind == "none":
            return None, ClientSecrets(
                ReplicaSecrets(), KeyedDigests.from_env(config.secret_env, secrets.token_bytes(32))
            )
        if config.kind == "ray":
            actor = ray_records(app_name, config.resume_window_s, label_selector)
            records: Records = actor
            digests = KeyedDigests.from_env(config.secret_env, actor.session_secret)
        else:
            url = os.environ.get(config.redis_url_env)
            if not url:
                raise RuntimeError(
                    f"ingress.session_store.kind is redis, but {config.redis_url_env} (its redis_url_env) "
                    "is not set in the replica's environment"
                )
            records = RedisRecords.connect(url, f"s2s:sessions:{app_name}:", config.resume_window_s)
            digests = KeyedDigests.from_env(config.secret_env, None)
        return cls(records, config.resume_window_s, digests, key), ClientSecrets(records, digests)

    async def new_session(self, with_key: bool) -> StoredSession:
        """A new session, its record kept from now on; ``with_key``: it was opened with the
        API key, which its resumes must then present too."""
        token = ResumeToken.new(new_id("sess"))
        key_digest = await self._key_digest(with_key)
        await self._records.open(token.session_id, await self._token_digest(token), key_digest, EMPTY_STATE)
        return await self._stored(token, key_digest, 0)

    async def resumed_session(self, token_text: str, with_key: bool) -> StoredSession | None:
        """The session ``token_text`` resumes, with a new token; ``None`` for a token that
        is malformed, wrong, expired, used or foreign (all look the same to the client)."""
        token = ResumeToken.parse(token_text)
        if token is None:
            return None
        rotated = ResumeToken.new(token.session_id)
        key_digest = await self._key_digest(with_key)
        found = await self._records.resume(
            token.session_id, await self._token_digest(token), key_digest, await self._token_digest(rotated)
        )
        if found is None:
            return None
        self._handed_back[token.session_id] = (token, rotated)
        epoch, state = found
        return await self._stored(rotated, key_digest, epoch, state)

    def started(self, session_id: str) -> None:
        """The session was told its new token: the one it came with is spent for good."""
        self._handed_back.pop(session_id, None)

    async def unstarted(self, session_id: str, with_key: bool) -> None:
        """The session failed before it was told its token: a resume's record goes back to
        the token its client still holds, and the record is released as at a close."""
        tokens = self._handed_back.pop(session_id, None)
        self.closed(session_id)
        if tokens is not None:
            came_with, rotated = tokens
            key_digest = await self._key_digest(with_key)
            with contextlib.suppress(Exception):  # the client's next try is refused, as if expired
                await self._records.resume(
                    session_id, await self._token_digest(rotated), key_digest, await self._token_digest(came_with)
                )

    async def _token_digest(self, token: ResumeToken) -> bytes:
        return await self._digests.of("resume_token", token.secret)

    async def _key_digest(self, with_key: bool) -> bytes | None:
        return await self._digests.of("api_key", self._key) if with_key and self._key is not None else None

    async def _stored(
        self, token: ResumeToken, key_digest: bytes | None, epoch: int, state: SessionState | None = None
    ) -> StoredSession:
        session_id = token.session_id
        self._open[session_id] = lambda: None
        if self._renewal is None or self._renewal.done():
            self._renewal = spawn_detached(self._renew_open())
        secret_digest = await self._token_digest(token)

        def write(state: SessionState) -> RecordWrite:
            return RecordWrite(session_id, epoch, state, secret_digest, key_digest)

        save = functools.partial(self._save, write)
        return StoredSession(session_id, str(token), save, functools.partial(self._rewrite_with, session_id), state)

    async def _save(self, write: Callable[[SessionState], RecordWrite], state: SessionState) -> bool:
        """Keep the session's state (called from a detached task) with the replica's other
        writes; ``False``: resumed elsewhere."""
        one = write(state)
        kept = asyncio.get_running_loop().create_future()
        self._writes[one.session_id] = (one, kept)
        if self._writer is None or self._writer.done():
            self._writer = spawn_detached(self._write_batches())
        return await kept

    async def _write_batches(self) -> None:
        loop = asyncio.get_running_loop()
        while self._writes:
            batch, self._writes = list(self._writes.values()), {}
            started = loop.time()
            try:
                kept = await self._records.save_many([write for write, _ in batch])
            except Exception as error:  # each session's recorder logs it; its next change writes again
                for _, future in batch:
                    if not future.done():  # done: its recorder was cancelled meanwhile
                        future.set_exception(error)
            else:
                for (_, future), one in zip(batch, kept, strict=True):
                    if not future.done():
                        future.set_result(one)
            await asyncio.sleep(max(0.0, WRITE_INTERVAL_S - (loop.time() - started)))

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
            lacking = await self._records.renew(session_ids)
        except Exception:  # the next renewal tries again, a quarter window later
            logger.warning("could not renew %d session records", len(session_ids), exc_info=True)
            return
        if lacking:
            logger.warning("the session store lacked %d open sessions' records: writing them again", len(lacking))
        for session_id in lacking:
            self._open.get(session_id, lambda: None)()

"""The ``ray`` session store: the records' rules in plain Python, kept by one named,
detached actor per application (:func:`ray_records`).

The actor runs on the ingress's nodes and outlives every ingress replica (a redeploy, a
scale-down, a killed replica) but not the Ray cluster. Ray restarts it if it dies (its node
lost), empty: each open session writes its whole record again at its next change, or at the
next renewal, which names the records the store lacks; a resume before that is refused like
an expired token, and a session whose socket had closed before the loss cannot be resumed.
"""

import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, cast

import ray
from ray.actor import ActorHandle

from deployments.client_secrets import ClientSecretGrant, opens
from deployments.session_store.record import SessionState

EXPIRY_SWEEP_S = 1.0


class RecordWrite(NamedTuple):
    """An open session's state, written by the connection that holds epoch ``epoch`` and
    whose token's secret is ``secret_digest``."""

    session_id: str
    epoch: int
    state: SessionState
    secret_digest: bytes
    key_digest: bytes | None


@dataclass
class _ClientSecret:
    grant: ClientSecretGrant
    expires_at: float


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
        self._client_secrets: dict[bytes, _ClientSecret] = {}
        self._swept_at = clock()
        self._session_secret = secrets.token_bytes(32)

    def session_secret(self) -> bytes:
        """The digests' key where the operator gave none: made with the records it keys, so
        it lives exactly as long as they do (:mod:`deployments.keyed_digests`)."""
        return self._session_secret

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

    def save_many(self, writes: list[RecordWrite]) -> list[bool]:
        """:meth:`save` of each, in order (one actor call for a replica's writes)."""
        return [self.save(*write) for write in writes]

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

    def add_client_secret(self, secret_digest: bytes, grant: ClientSecretGrant, ttl_s: float) -> None:
        """An ephemeral client secret, good for ``ttl_s`` from now."""
        self._sweep()
        self._client_secrets[secret_digest] = _ClientSecret(grant, self._clock() + ttl_s)

    def redeem_client_secret(self, secret_digest: bytes, call_sid: str) -> ClientSecretGrant | None:
        """What the secret grants to a session (of the phone call ``call_sid``, if any),
        unless it is unknown, expired or another call's; a one-use secret is gone once
        redeemed."""
        self._sweep()
        found = self._client_secrets.get(secret_digest)
        if found is None or found.expires_at <= self._clock() or not opens(found.grant, call_sid):
            return None
        if found.grant.get("one_use"):
            del self._client_secrets[secret_digest]
        return found.grant

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
        for digest in [d for d, secret in self._client_secrets.items() if secret.expires_at <= now]:
            del self._client_secrets[digest]


class ActorRecords:
    """The store's calls made on the actor that keeps :class:`SessionRecords`."""

    def __init__(self, actor: ActorHandle) -> None:
        self._actor = actor

    async def open(self, session_id: str, secret_digest: bytes, key_digest: bytes | None, state: SessionState) -> None:
        await self._actor.open.remote(session_id, secret_digest, key_digest, state)

    async def save_many(self, writes: list[RecordWrite]) -> list[bool]:
        return cast(list[bool], await self._actor.save_many.remote(writes))

    async def renew(self, session_ids: list[str]) -> list[str]:
        return cast(list[str], await self._actor.renew.remote(session_ids))

    async def resume(
        self, session_id: str, secret_digest: bytes, key_digest: bytes | None, new_secret_digest: bytes
    ) -> tuple[int, SessionState] | None:
        found = await self._actor.resume.remote(session_id, secret_digest, key_digest, new_secret_digest)
        return cast(tuple[int, SessionState] | None, found)

    async def add_client_secret(self, secret_digest: bytes, grant: ClientSecretGrant, ttl_s: float) -> None:
        await self._actor.add_client_secret.remote(secret_digest, grant, ttl_s)

    async def redeem_client_secret(self, secret_digest: bytes, call_sid: str) -> ClientSecretGrant | None:
        found = await self._actor.redeem_client_secret.remote(secret_digest, call_sid)
        return cast(ClientSecretGrant | None, found)

    async def session_secret(self) -> bytes:
        return cast(bytes, await self._actor.session_secret.remote())


class ReplicaSecrets:
    """Client secrets in this process, where the server keeps no store: a secret then opens
    sessions only on the ingress replica that made it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._records = SessionRecords(1.0, clock)

    async def add_client_secret(self, secret_digest: bytes, grant: ClientSecretGrant, ttl_s: float) -> None:
        self._records.add_client_secret(secret_digest, grant, ttl_s)

    async def redeem_client_secret(self, secret_digest: bytes, call_sid: str) -> ClientSecretGrant | None:
        return self._records.redeem_client_secret(secret_digest, call_sid)


def ray_records(app_name: str, window_s: float, label_selector: dict[str, str] | None) -> ActorRecords:
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
    return ActorRecords(cast(ActorHandle, options.remote(window_s)))

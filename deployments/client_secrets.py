"""Ephemeral client secrets (``ek_…``), in the shape of OpenAI's GA
``POST /v1/realtime/client_secrets``: what a browser or a phone call holds instead of the
API key.

The operator's backend asks with the API key and gets a secret that opens sessions until
``expires_at`` (10 s to 2 h; 10 minutes by default), on ``/v1/realtime`` and on
``/v1/realtime/calls``, each session opening with the settings it was made with (as its
first ``session.update``). A phone call's TwiML carries a one-use secret bound to its call
(:mod:`deployments.phone_calls`). Only the secret's keyed digest is kept, in the session
store, so every ingress replica accepts it and a reader of the store holds nothing it can
present. A secret never makes another secret: only the API key does.

A phone call also has a standing grant (:meth:`ClientSecrets.keep_call`): what its next
stream opens, the session it resumes or how the call ends. It is kept under the keyed digest
of the call's ``CallSid``, so no value of it is ever handed out: only a stream that redeemed
that call's one-use secret, or the call's own webhook, reads it.
"""

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, Protocol, TypedDict

from pydantic import BaseModel, ConfigDict, Field

from deployments.keyed_digests import KeyedDigests

PREFIX = "ek_"
SECRET_BYTES = 32
DEFAULT_TTL_S = 600
MAX_SECRET_CHARS = 200
CALL_GRANT_TTL_S = 4 * 3600
"""A call's standing grant outlives any call: Twilio ends a call after 4 hours by default."""


class ClientSecretGrant(TypedDict):
    """What a secret opens, as the store keeps it (JSON-shaped)."""

    session: dict[str, Any]
    """The settings its sessions open with (a ``session.update``'s ``session``; ``{}``: the server's)."""
    one_use: bool
    call_sid: str
    """The phone call it is bound to (``""``: none)."""
    resume_token: NotRequired[str]
    """A call's standing grant: the token that resumes its session, sealed in the store
    (``KeyedDigests.sealed``; ``""``: none yet)."""
    call_ending: NotRequired[str]
    """A call's standing grant: how the call ends once its stream closes (``hang_up``,
    ``transfer <number>``; ``""``: it goes on, on a new stream)."""


class ExpiresAfter(BaseModel):
    model_config = ConfigDict(extra="forbid")

    anchor: Literal["created_at"] = "created_at"
    seconds: int = Field(DEFAULT_TTL_S, ge=10, le=7200)


class ClientSecretRequest(BaseModel):
    """The body of ``POST /v1/realtime/client_secrets`` (every field optional)."""

    model_config = ConfigDict(extra="forbid")

    expires_after: ExpiresAfter = ExpiresAfter()
    session: dict[str, Any] | None = None


class SecretRecords(Protocol):
    """Where the digests live: the session store's records, or this replica's."""

    async def add_client_secret(self, secret_digest: bytes, grant: ClientSecretGrant, ttl_s: float) -> None: ...

    async def redeem_client_secret(self, secret_digest: bytes, call_sid: str) -> ClientSecretGrant | None: ...


@dataclass(frozen=True)
class MintedSecret:
    value: str
    expires_at: int
    """Seconds since the epoch."""


class ClientSecrets:
    def __init__(self, records: SecretRecords, digests: KeyedDigests, clock: Callable[[], float] = time.time) -> None:
        self._records, self._digests, self._clock = records, digests, clock

    async def mint(
        self, session: dict[str, Any], ttl_s: int, *, one_use: bool = False, call_sid: str = ""
    ) -> MintedSecret:
        """A new secret opening sessions with ``session`` for ``ttl_s``."""
        value = PREFIX + secrets.token_urlsafe(SECRET_BYTES)
        grant: ClientSecretGrant = {"session": session, "one_use": one_use, "call_sid": call_sid}
        await self._records.add_client_secret(await self._digests.of("client_secret", value), grant, ttl_s)
        return MintedSecret(value, int(self._clock()) + ttl_s)

    async def redeem(self, value: str, call_sid: str = "") -> ClientSecretGrant | None:
        """What ``value`` grants to a session (of the phone call ``call_sid``, if any);
        ``None`` for anything that is not a live secret of this server for it. A secret
        bound to a call opens that call's stream and nothing else."""
        if not is_client_secret(value):
            return None
        return await self._records.redeem_client_secret(await self._digests.of("client_secret", value), call_sid)

    async def keep_call(self, call_sid: str, *, resume_token: str = "", call_ending: str = "") -> None:
        """Keep what call ``call_sid``'s next stream opens: the session ``resume_token``
        resumes, or the end of the call (``call_ending``)."""
        grant: ClientSecretGrant = {
            "session": {},
            "one_use": False,
            "call_sid": call_sid,
            "resume_token": await self._digests.sealed("phone_call", resume_token) if resume_token else "",
            "call_ending": call_ending,
        }
        await self._records.add_client_secret(await self._digests.of("phone_call", call_sid), grant, CALL_GRANT_TTL_S)

    async def call(self, call_sid: str) -> ClientSecretGrant | None:
        """Call ``call_sid``'s standing grant, its resume token unsealed (``None``: its first
        stream has not started)."""
        grant = await self._records.redeem_client_secret(await self._digests.of("phone_call", call_sid), call_sid)
        if grant is not None and grant.get("resume_token"):
            grant = grant | {"resume_token": await self._digests.unsealed("phone_call", grant["resume_token"]) or ""}
        return grant


def opens(grant: ClientSecretGrant, call_sid: str) -> bool:
    """Does ``grant`` open a session of the call ``call_sid`` (``""``: not a call)? A secret
    bound to a call opens that call's stream and nothing else; an unbound one opens any."""
    return grant["call_sid"] in ("", call_sid)


def is_client_secret(value: str) -> bool:
    """Has ``value`` a client secret's shape (nothing is looked up)?"""
    return value.startswith(PREFIX) and len(value) <= MAX_SECRET_CHARS

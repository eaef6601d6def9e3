"""What the session store keeps of a secret: an HMAC under the server's session secret.

Resume tokens, the API key, ephemeral client secrets and phone calls' ids are kept only as
HMAC-SHA256(session secret, purpose + secret). A reader of the store (anyone who can reach
Redis, or a dump of it) then holds nothing it can present, and cannot test guesses of the
API key against the records offline, as it could against a bare SHA-256.

The one secret the server must read back, a phone call's resume token (which its next
stream presents for it), is kept sealed: Fernet (AES-CBC and HMAC, from ``cryptography``)
under a key derived from the same session secret, so the store's reader holds nothing it
can present there either.

The session secret is the one named by ``session_store.secret_env`` (the chart makes it a
Secret). Without it, the ``ray`` store's actor makes one when it starts: it lives exactly as
long as the records it keys. A ``redis`` store outlives the Ray cluster, so it needs the
operator's; a server with no store keys its in-replica client secrets with a random one.
"""

import asyncio
import base64
import hashlib
import hmac
import os
from collections.abc import Awaitable, Callable
from typing import Literal

from cryptography.fernet import Fernet, InvalidToken

Purpose = Literal["resume_token", "api_key", "client_secret", "phone_call"]
"""Each kind of secret has its own digests: one never matches another kind's."""


class KeyedDigests:
    def __init__(self, key: bytes | Callable[[], Awaitable[bytes]]) -> None:
        """``key``: the session secret, or what fetches it at the first digest."""
        self._key = key if isinstance(key, bytes) else None
        self._fetch = key if not isinstance(key, bytes) else None
        self._lock = asyncio.Lock()

    @classmethod
    def from_env(cls, variable: str, fallback: bytes | Callable[[], Awaitable[bytes]] | None) -> "KeyedDigests":
        """The secret in ``variable``, else ``fallback`` (``None``: the variable must be set)."""
        secret = os.environ.get(variable)
        if secret:
            return cls(secret.encode())
        if fallback is None:
            raise RuntimeError(
                f"the session store needs a session secret in {variable} (session_store.secret_env): "
                "it keys what the store keeps of every token, and must be the same on every ingress replica"
            )
        return cls(fallback)

    async def of(self, purpose: Purpose, secret: str | bytes) -> bytes:
        message = purpose.encode() + b"\0" + (secret.encode() if isinstance(secret, str) else secret)
        return hmac.digest(await self._secret(), message, hashlib.sha256)

    async def sealed(self, purpose: Purpose, secret: str) -> str:
        """``secret``, sealed so that only the holder of the session secret reads it back."""
        return (await self._fernet(purpose)).encrypt(secret.encode()).decode()

    async def unsealed(self, purpose: Purpose, sealed: str) -> str | None:
        """What :meth:`sealed` sealed (``None``: not sealed by this session secret, or altered)."""
        try:
            return (await self._fernet(purpose)).decrypt(sealed.encode()).decode()
        except InvalidToken:
            return None

    async def _fernet(self, purpose: Purpose) -> Fernet:
        key = hmac.digest(await self._secret(), b"sealing\0" + purpose.encode(), hashlib.sha256)
        return Fernet(base64.urlsafe_b64encode(key))

    async def _secret(self) -> bytes:
        if self._key is None:
            assert self._fetch is not None
            async with self._lock:  # one fetch, however many sessions open at once
                if self._key is None:
                    self._key = await self._fetch()
        return self._key

"""The ``redis`` session store: the records' rules kept in a Redis server, which outlives the
Ray cluster (a KubeRay ``NewCluster`` upgrade brings up a new one, whose ingress resumes the
old one's sessions from here).

One hash per session (``secret``, ``key``: keyed digests,
:mod:`deployments.keyed_digests`, ``b""`` for no API key; ``epoch``; ``state``: the record
as JSON), under ``<prefix><session id>``, and Redis's own key expiry as the resume window.
An ephemeral client secret is one JSON string under ``<prefix>client_secret:<its digest>``,
expiring with it. Each rule that reads and then writes runs as one Lua script, so two
replicas (or two clusters) racing on a session see the order Redis gives them, as the
``ray`` store's one actor does. Digests are compared in Python, in constant time; the script
that takes a resume compares again, only to refuse a token that another connection used in
between.
"""

import hmac
import json
from typing import cast

import redis.asyncio as redis

from deployments.client_secrets import ClientSecretGrant, opens
from deployments.session_store.ray_records import RecordWrite
from deployments.session_store.record import SessionState

CONNECT_TIMEOUT_S = 1.0
CALL_TIMEOUT_S = 2.0
"""A store that does not answer in this long fails the call (a resume is refused with 503,
a new session goes on without a token): a handshake never hangs on it."""

SAVE = """
local epoch = redis.call('HGET', KEYS[1], 'epoch')
local given = tonumber(ARGV[1])
if epoch and tonumber(epoch) > given then return 0 end
if (not epoch) or tonumber(epoch) < given then
  redis.call('HSET', KEYS[1], 'secret', ARGV[3], 'key', ARGV[4], 'epoch', ARGV[1])
end
redis.call('HSET', KEYS[1], 'state', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""
"""An open session's write: refused (0) when a newer epoch holds the record; a record that
is missing (the store lost it) or of an older epoch is taken over."""

TAKE = """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'secret') ~= ARGV[2] then
  return false
end
redis.call('HSET', KEYS[1], 'secret', ARGV[3], 'epoch', tonumber(ARGV[1]) + 1)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return redis.call('HGET', KEYS[1], 'state')
"""
"""A resume whose token was checked: the next epoch and a new secret, unless another
connection took the record since; returns the state as it is now."""


class RedisRecords:
    def __init__(self, client: "redis.Redis", prefix: str, window_s: float) -> None:
        self._redis = client
        self._prefix = prefix
        self._window_ms = max(1, round(window_s * 1000))
        self._save = client.register_script(SAVE)
        self._take = client.register_script(TAKE)

    @classmethod
    def connect(cls, url: str, prefix: str, window_s: float) -> "RedisRecords":
        """Records in the server at ``url`` (connected at the first call)."""
        client = redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT_S, socket_timeout=CALL_TIMEOUT_S)
        return cls(client, prefix, window_s)

    def _key(self, session_id: str) -> str:
        return self._prefix + session_id

    async def open(self, session_id: str, secret_digest: bytes, key_digest: bytes | None, state: SessionState) -> None:
        """A new session's record (epoch 0)."""
        fields = {"secret": secret_digest, "key": key_digest or b"", "epoch": 0, "state": json.dumps(state)}
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hset(self._key(session_id), mapping=fields)  # type: ignore[arg-type]
            pipe.pexpire(self._key(session_id), self._window_ms)
            await pipe.execute()

    async def save_many(self, writes: list[RecordWrite]) -> list[bool]:
        """Each write by :data:`SAVE`, all in one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for session_id, epoch, state, secret_digest, key_digest in writes:
                args: list[bytes | str | int] = [
                    epoch,
                    json.dumps(state),
                    secret_digest,
                    key_digest or b"",
                    self._window_ms,
                ]
                await self._save(keys=[self._key(session_id)], args=args, client=pipe)
            kept = await pipe.execute()
        return [bool(one) for one in kept]

    async def renew(self, session_ids: list[str]) -> list[str]:
        """Extends the open sessions' records; returns those it has none of."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for session_id in session_ids:
                pipe.pexpire(self._key(session_id), self._window_ms)
            extended = await pipe.execute()
        return [session_id for session_id, found in zip(session_ids, extended, strict=True) if not found]

    async def resume(
        self, session_id: str, secret_digest: bytes, key_digest: bytes | None, new_secret_digest: bytes
    ) -> tuple[int, SessionState] | None:
        found = await self._redis.hmget(self._key(session_id), ["secret", "key", "epoch"])
        stored_secret, stored_key, epoch = cast(list[bytes | None], found)  # the client decodes nothing
        if epoch is None:
            return None
        # Both digests are always compared: the time taken says nothing of which was wrong.
        secret_ok = hmac.compare_digest(secret_digest, stored_secret or b"")
        key_ok = hmac.compare_digest(key_digest or b"", stored_key or b"")
        if not (secret_ok and key_ok):
            return None
        args: list[bytes | int] = [epoch, secret_digest, new_secret_digest, self._window_ms]
        state = await self._take(keys=[self._key(session_id)], args=args)
        if state is None:
            return None
        return int(epoch) + 1, cast(SessionState, json.loads(state))

    def _secret_key(self, secret_digest: bytes) -> str:
        return f"{self._prefix}client_secret:{secret_digest.hex()}"

    async def add_client_secret(self, secret_digest: bytes, grant: ClientSecretGrant, ttl_s: float) -> None:
        """An ephemeral client secret, kept ``ttl_s`` by Redis's own expiry."""
        await self._redis.set(self._secret_key(secret_digest), json.dumps(grant), px=max(1, round(ttl_s * 1000)))

    async def redeem_client_secret(self, secret_digest: bytes, call_sid: str) -> ClientSecretGrant | None:
        """What the secret grants, as the ``ray`` store's rules say; a one-use one is taken
        by one delete (two streams racing on it: one wins)."""
        key = self._secret_key(secret_digest)
        found = await self._redis.get(key)
        if found is None:
            return None
        grant = cast(ClientSecretGrant, json.loads(found))
        if not opens(grant, call_sid):
            return None
        if grant["one_use"] and not await self._redis.delete(key):
            return None
        return grant

    async def close(self) -> None:
        await self._redis.aclose()

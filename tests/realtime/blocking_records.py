"""The ``redis`` store's records called as the ``ray`` store's rules are (synchronously), so
one test of the store's rules runs on both."""

import asyncio
import secrets
from typing import Any

from deployments.session_store.ray_records import RecordWrite
from deployments.session_store.redis_records import RedisRecords


class BlockingRedisRecords:
    """The ``redis`` store's records called as the ``ray`` store's rules are (synchronously),
    each call run to its end on a loop of its own; a fresh key prefix is a fresh store."""

    def __init__(self, url: str, window_s: float) -> None:
        self._loop = asyncio.new_event_loop()
        self.prefix = f"test:{secrets.token_hex(6)}:"
        self._records = RedisRecords.connect(url, self.prefix, window_s)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._records, name)
        return lambda *args: self._loop.run_until_complete(method(*args))

    def save(self, *write: Any) -> bool:
        return self.save_many([RecordWrite(*write)])[0]  # type: ignore[no-any-return]

    def close(self) -> None:
        self._loop.run_until_complete(self._records.close())
        self._loop.close()

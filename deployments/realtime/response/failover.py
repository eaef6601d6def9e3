"""Speech that outlives its TTS replica: a sentence whose replica dies is spoken by another.

A TTS stream that fails because its replica actor is gone (killed, crashed, its node lost)
says nothing about the request: another replica would speak it. :class:`FailoverStream`
starts the piece again at once, on whichever replica Serve's router picks. The router has
already taken the dead replica out of rotation, or takes it out when the retry is sent there
(the send fails and the router picks again), so with two or more TTS replicas the retry
lands on a live one. Only a dead or unreachable replica counts (:func:`replica_lost`): a TTS
error in the model, a stream stopped as stale or cancelled, and a stage timeout all end
the response as before, visibly.

The bound: from the dead replica's error, the retries together have ``REPLICA_FAILOVER_S``
(2 s) to give the piece's next audio, and a piece is retried at most ``MAX_RETRIES`` (2)
times. If no live replica answers in time (the only replica died, and Serve is still
starting its replacement), the response fails with ``tts_failed``: the client is told
within 2 s instead of hearing seconds of silence. Each chunk of a retry is also bounded by
the stage timeout, as every TTS chunk is (``BoundedStages``).

No audio is said twice: a replica yields one whole chunk per sentence of the piece, never
part of one, so what the dead replica gave is a number of whole sentences. The retry
synthesises the piece again and its first that many chunks are skipped (the sentences of a
text are always cut the same way, by Piper as by the synthetic speaker). A cancel stops the
retry like any stream: ``cancel`` stops the current attempt and no new one starts.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import TypeVar, cast

from ray.exceptions import RayActorError, RayTaskError

from deployments.realtime.failures import StageFailure
from deployments.realtime.stages import StageStream

logger = logging.getLogger(__name__)

T = TypeVar("T")

REPLICA_FAILOVER_S = 2.0
"""Longest time from a replica's death to the retried piece's next audio; then the response
fails, visibly. Read at each failover (tests shorten it)."""
MAX_RETRIES = 2
"""Retries of one piece: a second covers a retry the router sent to the same dead replica
before it learnt of the death."""

_END = object()


def lost_replica(exc: BaseException) -> RayActorError | None:
    """The error of ``exc`` (or of the stage failure it became, by its cause) that says the
    call's replica actor died or cannot be reached (``ActorDiedError``,
    ``ActorUnavailableError``), not that the request failed on it: a ``RayTaskError`` is the
    model's own error, even one whose cause is an actor's death (an upstream call of the
    replica's, not the replica)."""
    causes = (exc, exc.__cause__) if isinstance(exc, StageFailure) else (exc,)
    return next((e for e in causes if isinstance(e, RayActorError) and not isinstance(e, RayTaskError)), None)


def replica_lost(exc: BaseException) -> bool:
    return lost_replica(exc) is not None


class FailoverStream(StageStream[T]):
    """The stream ``start()`` returns, started again (its items already given skipped) when
    its replica dies, within the bound in the module's docstring. ``label`` names the
    response in the log."""

    def __init__(self, start: Callable[[], StageStream[T]], label: str = "") -> None:
        self._start = start
        self._label = label
        self._stream: StageStream[T] | None = None
        self._cancelled = False
        self.retries = 0

    def __aiter__(self) -> AsyncIterator[T]:
        return self._items()

    def cancel(self) -> None:
        self._cancelled = True
        if self._stream is not None:
            self._stream.cancel()

    async def _items(self) -> AsyncIterator[T]:
        given = 0  # items given to the consumer, over every attempt
        deadline: float | None = None  # while a retry has yet to give a new item: when it must
        while True:
            stream = self._stream = self._start()
            items, received = aiter(stream), 0
            while True:
                try:
                    item = await self._next(items, deadline)
                except Exception as exc:
                    if self._cancelled or not replica_lost(exc) or self.retries >= MAX_RETRIES:
                        raise
                    if deadline is None:
                        deadline = asyncio.get_running_loop().time() + REPLICA_FAILOVER_S
                    self.retries += 1
                    logger.warning(
                        "response %s: a TTS replica was lost mid-piece (%s, %d of its chunks given); "
                        "retrying the piece on another replica (retry %d of %d)",
                        self._label,
                        type(exc.__cause__ or exc).__name__,
                        given,
                        self.retries,
                        MAX_RETRIES,
                    )
                    with contextlib.suppress(Exception):  # an unreachable replica may still run it
                        stream.cancel()
                    break
                if item is _END:
                    return
                received += 1
                if received > given:  # a chunk the dead replica had not given
                    given += 1
                    deadline = None
                    yield cast(T, item)

    async def _next(self, items: AsyncIterator[T], deadline: float | None) -> T | object:
        """The next item, or ``_END``; by ``deadline`` (a failover's), or a visible failure."""
        try:
            if deadline is None:
                return await anext(items)
            timeout = asyncio.timeout_at(deadline)
            try:
                async with timeout:
                    return await anext(items)
            except TimeoutError:
                if not timeout.expired():
                    raise
                if self._stream is not None:
                    self._stream.cancel()  # a request still waiting for a replica: withdraw it
                raise StageFailure(
                    "tts_failed", f"speech synthesis failed: no replica took over within {REPLICA_FAILOVER_S:g} s"
                ) from None
        except StopAsyncIteration:
            return _END

"""Single-process cancellation signal: huggingface/speech-to-speech's generation counter.

One writer (the session) and any number of readers. A response captures ``generation``
when it starts and stops as soon as ``is_stale(gen)`` is true. Reads and writes are single
attribute operations, which the GIL makes atomic, so there is no lock.

The scope only says *which work is stale*. What a cancel drops of the output already
produced is decided by the session's outbox, by response id and event type
(``deployments.realtime.outbox``), not here.
"""

GENERATION_MASK = 0xFFFFFFFF
"""Generations are 32-bit: they wrap instead of growing without bound."""


class CancelScope:
    """The generation counter: a cancel supersedes every piece of work started before it."""

    def __init__(self) -> None:
        self._gen = 0

    @property
    def generation(self) -> int:
        """The generation a response starting now belongs to."""
        return self._gen

    def cancel(self) -> int:
        """Supersede the current generation; return the new one."""
        self._gen = (self._gen + 1) & GENERATION_MASK
        return self._gen

    def is_stale(self, gen: int) -> bool:
        """True once ``gen`` has been superseded by a cancel."""
        return gen != self._gen

"""Single-process cancellation signal: the semantics of huggingface/speech-to-speech's CancelScope.

One writer (the session's router) and any number of readers. A response captures
``generation`` when it starts and stops as soon as ``is_stale(gen)`` is true; the send loop
drops stale output while ``discarding`` is set. Reads and writes are single attribute
operations, which the GIL makes atomic, so there is no lock.
"""

GENERATION_MASK = 0xFFFFFFFF
"""Generations are 32-bit: they wrap instead of growing without bound."""


class CancelScope:
    """Generation counter plus the send loop's discard guard."""

    def __init__(self) -> None:
        self._gen = 0
        self._discarding = False
        self._discarded_generation: int | None = None

    @property
    def generation(self) -> int:
        """The generation a response starting now belongs to."""
        return self._gen

    @property
    def discarding(self) -> bool:
        """Whether the send loop should drop output of superseded generations."""
        return self._discarding

    def cancel(self) -> int:
        """Supersede the current generation and raise the discard guard; return the new one."""
        self._discarded_generation = self._gen
        self._gen = (self._gen + 1) & GENERATION_MASK
        self._discarding = True
        return self._gen

    def is_stale(self, gen: int) -> bool:
        """True once ``gen`` has been superseded by a cancel."""
        return gen != self._gen

    def response_done(self, generation: int | None = None) -> None:
        """A response finished: clear the guard, unless ``generation`` is unrelated to it.

        The end of an older response that was neither the one cancelled nor the current one
        must not lower the guard, or the cancelled response's late output would leak out.
        """
        if (
            generation is not None
            and self._discarded_generation is not None
            and generation not in (self._discarded_generation, self._gen)
        ):
            return
        self._clear_guard()

    def new_response(self) -> None:
        """An explicit new response starts: its output must not be dropped."""
        self._clear_guard()

    def reset(self) -> None:
        """Clear the discard state (session claimed or released).

        The generation is kept on purpose: rewinding it would make work captured before the
        reset look fresh again.
        """
        self._clear_guard()

    def _clear_guard(self) -> None:
        self._discarding = False
        self._discarded_generation = None

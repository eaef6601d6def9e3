"""The audio of the server's own lines (a call's greeting, its prompt after a silence), made
once per ingress replica and kept, so that a call's first words wait on no model.

A phone caller hears the greeting first: answer → greeting is what callers feel, and a TTS
call there costs its queue and its synthesis on every call. The lines are synthesised as
the replica starts (:meth:`SpokenLines.warm`), sentence by sentence (:func:`sentences`), as
a scripted answer says them (``Responder.say``): each sentence's TTS request is then served
from here, and the answer is paced between sentences like any other.
"""

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterable

from deployments.realtime.stages import StageStream

logger = logging.getLogger(__name__)

SENTENCE = re.compile(r"[^.!?]*[.!?]+|[^.!?]+$")

WARM_TRIES = 30
WARM_RETRY_S = 2.0
"""A TTS deployment still starting fails the first calls: the lines are asked for again."""


def sentences(line: str) -> list[str]:
    """The pieces a line is said in: its sentences."""
    return [sentence.strip() for sentence in SENTENCE.findall(line) if sentence.strip()]


class KeptSpeech(StageStream[bytes]):
    """A line's kept audio, as a TTS stream of it would give it."""

    def __init__(self, chunks: tuple[bytes, ...]) -> None:
        self._chunks = chunks

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks_now()

    async def _chunks_now(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk

    def cancel(self) -> None:
        return


class SpokenLines:
    def __init__(self) -> None:
        self._audio: dict[str, tuple[bytes, ...]] = {}

    def kept(self, text: str) -> KeptSpeech | None:
        """The line's audio, if it is one of the server's lines and has been made."""
        chunks = self._audio.get(text)
        return KeptSpeech(chunks) if chunks is not None else None

    async def warm(self, lines: Iterable[str], synthesize: Callable[[str], StageStream[bytes]]) -> None:
        """Make each line's sentences' audio with ``synthesize``, retrying while the TTS starts."""
        for text in (sentence for line in lines for sentence in sentences(line)):
            for attempt in range(WARM_TRIES):
                try:
                    self._audio[text] = tuple([chunk async for chunk in synthesize(text)])
                    break
                except Exception:
                    if attempt == WARM_TRIES - 1:
                        logger.warning("the line %r could not be synthesised ahead: each call makes it", text)
                    await asyncio.sleep(WARM_RETRY_S)

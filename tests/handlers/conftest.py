"""Handler fixtures not shared with other test folders."""

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from handlers.llm import LanguageModel
from handlers.vad import VoiceActivityDetector


@pytest.fixture(scope="session")
def vad() -> VoiceActivityDetector:
    return VoiceActivityDetector()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def llm() -> AsyncIterator[LanguageModel]:
    """Module-scoped: its 3.7 GB engine is gone before the end-to-end tests start theirs."""
    model = LanguageModel.create()
    yield model
    model.shutdown()

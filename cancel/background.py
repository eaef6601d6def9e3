"""Background tasks that belong to no request.

Serve cancels a request with ``ray.cancel``, which is recursive: every Ray call made on the
request's behalf is cancelled with it. Ray tells whose behalf a call is on from a context
variable that ``asyncio`` copies into every task a request creates. Machinery that outlives
the request which happened to start it (a worker's host polls, the writer's publishes and
host watches) is therefore started in a fresh, empty context: its calls are nobody's
children, and only its own owner stops it.
"""

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def spawn_detached(coroutine: Coroutine[Any, Any, T]) -> "asyncio.Task[T]":
    """Run ``coroutine`` as a task outside the current request's cancellation tree."""
    return asyncio.get_running_loop().create_task(coroutine, context=contextvars.Context())

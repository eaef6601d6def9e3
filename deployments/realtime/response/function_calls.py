"""The model's function calls in a response: each an output item of its own.

The LLM stream gives a call's start (its name and id) and then its arguments in deltas
(``handlers.tools``); here they become a :class:`FunctionCall` item with its
``response.function_call_arguments.*`` events. A call is whole only when the response
completes: a cancelled or failed one stays ``incomplete`` and never reaches a prompt.
"""

from collections.abc import Callable

from deployments.realtime.items import FunctionCall
from deployments.realtime.outbox import Outbox
from deployments.realtime.protocol import new_id
from deployments.realtime.response.events import ResponseEvents
from deployments.realtime.response.run import ResponseRun
from handlers.tools import FunctionCallArguments, FunctionCallStarted


class FunctionCalls:
    def __init__(
        self, run: ResponseRun, events: ResponseEvents, outbox: Outbox, announce: Callable[[FunctionCall], None]
    ) -> None:
        """``announce``: makes a new call the run's next output (the responder's)."""
        self._run, self._events, self._outbox, self._announce = run, events, outbox, announce
        self._calls: list[FunctionCall] = []
        """The calls, by the model's call index."""

    async def add(self, piece: FunctionCallStarted | FunctionCallArguments) -> None:
        if isinstance(piece, FunctionCallStarted):
            call = FunctionCall(new_id("item"), piece.call_id, piece.name, complete=False)
            self._calls.append(call)
            self._run.timeline.trace.function_called(piece.name, piece.call_id)
            self._announce(call)
            return
        call = self._calls[piece.index]
        await self._outbox.room(self._run.id)
        call.arguments += piece.delta

        def sent() -> None:
            call.sent_chars += len(piece.delta)

        self._events.arguments_delta(call, piece.delta, sent)


def finish_call(call: FunctionCall, events: ResponseEvents) -> None:
    """The response completed: the call is whole."""
    call.complete = True
    events.arguments_done(call)

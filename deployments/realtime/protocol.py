"""The OpenAI Realtime wire format: client events in, server events out.

Events are validated and built with the ``openai`` package's own Realtime types, so the
server speaks exactly what the SDK expects; this module only adds ids, error mapping and
the parts of the session description the server controls.
"""

import functools
import itertools
import json
import secrets
from typing import Any, Literal, cast, get_args

from openai import BaseModel as OpenAIModel
from openai.types.realtime import RealtimeClientEvent, RealtimeErrorEvent
from openai.types.realtime.realtime_error import RealtimeError
from pydantic import ValidationError

CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_POLICY_VIOLATION = 1008
CLOSE_INTERNAL_ERROR = 1011
CLOSE_SERVICE_RESTART = 1012
CLOSE_TRY_AGAIN_LATER = 1013
"""The WebSocket close codes the server uses (RFC 6455, section 7.4.1)."""


class SessionDrainingEvent(OpenAIModel):
    """Our extension (sent only to clients that ask for it, ``?drain_notice=true``: the
    Agents SDK reports an unknown event type to its app as an error): this session's replica
    is being replaced, and the socket closes with 1012 in ``closes_in_ms``; resume then, with
    the session's ``resume_token``, on another replica."""

    type: Literal["session.draining"]
    event_id: str
    closes_in_ms: int


@functools.cache
def _event_type(model: type[OpenAIModel]) -> str:
    """The literal ``type`` an event model declares (cached: it is read per audio delta)."""
    event_type: str = get_args(model.model_fields["type"].annotation)[0]
    return event_type


_CLIENT_EVENT_TYPES: dict[str, type[OpenAIModel]] = {
    _event_type(model): model for model in get_args(get_args(RealtimeClientEvent)[0])
}


class ProtocolError(Exception):
    """A client mistake: answered with an ``error`` event, the session goes on."""

    def __init__(self, code: str, message: str, param: str | None = None, event_id: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param, self.event_id = code, message, param, event_id


def new_id(prefix: str) -> str:
    """Server-generated, unguessable ids (``item_…``, ``resp_…``, ``sess_…``)."""
    return f"{prefix}_{secrets.token_urlsafe(12)}"


_EVENT_ID_PREFIX = f"event_{secrets.token_hex(6)}"
_event_numbers = itertools.count()


def new_event_id() -> str:
    """A server event's id: unique (this process's random prefix, then a counter), and cheap,
    for a few thousand events a second (``secrets`` costs a system call each)."""
    return f"{_EVENT_ID_PREFIX}{next(_event_numbers):x}"


def parse_client_event(text: str | bytes) -> RealtimeClientEvent:
    try:
        data = json.loads(text)
    except RecursionError:
        raise ProtocolError("invalid_json", "event is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, an integer of over 4300 digits
        raise ProtocolError("invalid_json", f"event is not valid JSON: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise ProtocolError("invalid_event", "event must be a JSON object")
    client_event_id = data.get("event_id") if isinstance(data.get("event_id"), str) else None
    event_type = data.get("type")
    model = _CLIENT_EVENT_TYPES.get(event_type) if isinstance(event_type, str) else None
    if model is None:
        shown = repr(event_type)[:64] if isinstance(event_type, str) else f"of JSON type {type(event_type).__name__}"
        hint = f"; {GA_HINT}" if isinstance(event_type, str) and event_type in _BETA_EVENT_TYPES else ""
        raise ProtocolError(
            "invalid_event", f"unknown event type {shown}{hint}", param="type", event_id=client_event_id
        )
    try:
        return cast(RealtimeClientEvent, model.model_validate(data))
    except RecursionError:
        raise ProtocolError("invalid_event", "event is nested too deeply", event_id=client_event_id) from None
    except ValidationError as exc:
        param, message = validation_message(exc)
        if event_type == "session.update" and _beta_session(data.get("session")):
            message += f"; {GA_HINT}"
        raise ProtocolError("invalid_event", message, param, client_event_id) from None


GA_HINT = (
    "this server speaks the GA Realtime protocol (session.type 'realtime', audio settings under "
    "session.audio.input and session.audio.output); the beta protocol's shapes are not served"
)
_BETA_SESSION_FIELDS = {"modalities", "input_audio_format", "output_audio_format", "input_audio_transcription", "voice"}
_BETA_EVENT_TYPES = {"transcription_session.update"}


def _beta_session(session: Any) -> bool:
    """Whether a ``session.update``'s session has the beta protocol's shape."""
    return isinstance(session, dict) and ("type" not in session or bool(_BETA_SESSION_FIELDS & session.keys()))


def validation_message(exc: ValidationError) -> tuple[str, str]:
    """The parameter (in the protocol's terms: ``session.audio.input.format.rate``, not the
    SDK's class path) and what is wrong with it. Where a union's members all failed, the
    most specific parameter is named, with what each member would have taken there."""
    by_param: dict[str, list[str]] = {}
    for error in exc.errors():
        parts = [str(part) for part in error["loc"] if not (isinstance(part, str) and part[:1].isupper())]
        by_param.setdefault(".".join(parts), []).append(error["msg"])
    param = max(by_param, key=lambda name: name.count(".") + bool(name))
    messages = list(dict.fromkeys(by_param[param]))
    prefix = "Input should be "
    if len(messages) > 1 and all(message.startswith(prefix) for message in messages):
        message = prefix + " or ".join(message.removeprefix(prefix) for message in messages)
    else:
        message = messages[0]
    return param[:200], f"{message[:200]} at {param[:200]!r}"


def error_event(error: ProtocolError, error_type: str = "invalid_request_error") -> RealtimeErrorEvent:
    return RealtimeErrorEvent(
        type="error",
        event_id=new_event_id(),
        error=RealtimeError(
            type=error_type, code=error.code, message=error.message, param=error.param, event_id=error.event_id
        ),
    )


def server_event(model: type[OpenAIModel], **fields: Any) -> OpenAIModel:
    """Build a server event of ``model`` with a fresh ``event_id`` and its literal ``type``."""
    return model(type=_event_type(model), event_id=new_event_id(), **fields)


def encode(event: OpenAIModel) -> str:
    return event.model_dump_json(exclude_none=True)

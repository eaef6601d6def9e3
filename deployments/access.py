"""Who may open a session, and refusals that say what was wrong.

Checked before the WebSocket handshake is accepted, so a refused client gets an HTTP
status and no session state exists: 403 names what was refused (the key or the origin),
and a path that is not served gets 404 with the paths that are. The body is sent where
the server supports ASGI's WebSocket denial responses (uvicorn does: the HAProxy data path
and Serve's proxy); elsewhere the status alone is 403.
"""

import base64
import binascii
import hmac
import os

from fastapi import WebSocket
from fastapi.responses import JSONResponse
from starlette.requests import HTTPConnection

from deployments.realtime.protocol import CLOSE_POLICY_VIOLATION

REALTIME_SUBPROTOCOL = "realtime"
API_KEY_SUBPROTOCOL = "openai-insecure-api-key."
SERVED_PATHS = [
    "/v1/realtime (WebSocket)",
    "POST /v1/realtime/calls (WebRTC)",
    "/v1/realtime/ice-servers",
    "/v1/twilio/incoming-call (TwiML)",
    "/v1/twilio/media-stream (Twilio Media Streams)",
    "/ (the voice page)",
    "/healthz",
    "/readyz",
    "/stats",
    "/stats/turns",
]


def chosen_subprotocol(offered: list[str]) -> str | None:
    """Browsers' Realtime clients offer ``realtime`` (and ``openai-insecure-api-key.<key>``)
    and fail the handshake unless the server selects one; others offer none."""
    return REALTIME_SUBPROTOCOL if REALTIME_SUBPROTOCOL in offered else None


class Access:
    """The API key (if one is set) and the allowed origins (if listed)."""

    def __init__(self, api_key_env: str | None, allowed_origins: list[str] | None) -> None:
        self._key = _api_key(api_key_env)
        self._origins = allowed_origins

    @property
    def key(self) -> bytes | None:
        """The server's API key (``None``: none is asked for)."""
        return self._key

    def refusal(self, connection: HTTPConnection, offered: list[str]) -> str | None:
        """Why this handshake (or call) is refused (``None``: it is not)."""
        origin = connection.headers.get("origin")
        if origin is not None and self._origins is not None and origin not in self._origins:
            return f"the origin {origin[:100]!r} is not among this server's allowed_origins"
        if self._key is None:
            return None
        scheme, _, credentials = connection.headers.get("authorization", "").partition(" ")
        presented = [credentials] if scheme.lower() == "bearer" else []
        if scheme.lower() == "basic":  # a Twilio webhook's https://any:<key>@host/...
            presented.append(_basic_password(credentials))
        presented += [p.removeprefix(API_KEY_SUBPROTOCOL) for p in offered if p.startswith(API_KEY_SUBPROTOCOL)]
        if not presented:
            return f"no API key: send 'Authorization: Bearer <key>' or the subprotocol '{API_KEY_SUBPROTOCOL}<key>'"
        return self.key_refusal(presented)

    def key_refusal(self, presented: list[str]) -> str | None:
        """Why these keys are refused (``None``: one is the server's, or none is asked for)."""
        if self._key is None:
            return None
        if not presented:
            return "no API key"
        # Every candidate is compared: the time taken says nothing about which one was close.
        matches = [hmac.compare_digest(key.encode(), self._key) for key in presented]
        return None if any(matches) else "the API key is not this server's"


async def deny(websocket: WebSocket, status: int, code: str, message: str) -> None:
    """Refuse the handshake with ``status`` and a JSON body saying why, where the server can
    send one (else HTTP 403)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(refusal(status, code, message))
    else:
        await websocket.close(CLOSE_POLICY_VIOLATION)


def refusal(status: int, code: str, message: str) -> JSONResponse:
    """An HTTP refusal in the shape of the protocol's errors."""
    body = {"error": {"type": "invalid_request_error", "code": code, "message": message}}
    return JSONResponse(body, status_code=status)


def not_served(path: str) -> str:
    return f"{path[:100]!r} is not served here; this server serves " + ", ".join(SERVED_PATHS)


def _basic_password(credentials: str) -> str:
    try:
        return base64.b64decode(credentials, validate=True).decode().partition(":")[2]
    except (binascii.Error, UnicodeDecodeError):
        return ""


def _api_key(variable: str | None) -> bytes | None:
    if variable is None:
        return None
    key = os.environ.get(variable)
    if not key:
        raise RuntimeError(f"ingress.api_key_env names {variable!r}, which is not set in the replica's environment")
    return key.encode()

"""Who may open a session, and refusals that say what was wrong.

Checked before the WebSocket handshake is accepted, so a refused client gets an HTTP
status and no session state exists: 403 names what was refused (the key, the client secret
or the origin),
and a path that is not served gets 404 with the paths that are. The body is sent where
the server supports ASGI's WebSocket denial responses (uvicorn does: the HAProxy data path
and Serve's proxy); elsewhere the status alone is 403.
"""

import base64
import binascii
import hmac
import os
from dataclasses import dataclass, field
from typing import Any

from fastapi import WebSocket
from fastapi.responses import JSONResponse
from starlette.requests import HTTPConnection

from deployments.client_secrets import ClientSecrets, is_client_secret
from deployments.realtime.protocol import CLOSE_POLICY_VIOLATION

REALTIME_SUBPROTOCOL = "realtime"
API_KEY_SUBPROTOCOL = "openai-insecure-api-key."
SERVED_PATHS = [
    "/v1/realtime (WebSocket)",
    "POST /v1/realtime/calls (WebRTC)",
    "POST /v1/realtime/client_secrets",
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


@dataclass(frozen=True)
class Admission:
    """How a client was let in."""

    with_key: bool
    """It presented the API key (its sessions' resumes must too)."""
    opening: dict[str, Any] = field(default_factory=dict)
    """The settings of the client secret it presented (``{}``: none), its first ``session.update``."""


class Access:
    """The API key (if one is set), the client secrets it made, and the allowed origins (if listed)."""

    def __init__(self, key: bytes | None, allowed_origins: list[str] | None, secrets: ClientSecrets) -> None:
        """``key``: the one ``ingress.api_key_env`` names (``None``: none is asked for)."""
        self._key = key
        self._origins = allowed_origins
        self._secrets = secrets

    @property
    def key(self) -> bytes | None:
        """The server's API key (``None``: none is asked for)."""
        return self._key

    async def admit(self, connection: HTTPConnection, offered: list[str], resuming: bool = False) -> Admission | str:
        """Let in a handshake (or call) that presents the API key or a live client secret;
        else why not. ``resuming``: it carries a resume token, which is a credential of its
        own (the store checks it), so it needs no other."""
        origin = connection.headers.get("origin")
        if origin is not None and self._origins is not None and origin not in self._origins:
            return f"the origin {origin[:100]!r} is not among this server's allowed_origins"
        presented = _presented(connection, offered)
        if self._key is not None and self.key_refusal(presented) is None:
            return Admission(with_key=True)
        for candidate in filter(is_client_secret, presented):
            grant = await self._secrets.redeem(candidate)
            if grant is not None:
                return Admission(with_key=False, opening=grant["session"])
            if not resuming:
                return "the client secret is unknown or has expired: ask your backend for a new one"
        if self._key is None or resuming:
            return Admission(with_key=False)
        if not presented:
            return (
                f"no API key or client secret: send 'Authorization: Bearer <key>' or the subprotocol "
                f"'{API_KEY_SUBPROTOCOL}<key>'"
            )
        return "the API key is not this server's"

    def key_refusal(self, presented: list[str]) -> str | None:
        """Why these keys are refused (``None``: one is the server's, or none is asked for)."""
        if self._key is None:
            return None
        if not presented:
            return "no API key"
        # Every candidate is compared: the time taken says nothing about which one was close.
        matches = [hmac.compare_digest(key.encode(), self._key) for key in presented]
        return None if any(matches) else "the API key is not this server's"

    def bearer_refusal(self, connection: HTTPConnection) -> str | None:
        """Why a call that only the API key may make is refused (``None``: it is not)."""
        return self.key_refusal(_presented(connection, []))


def _presented(connection: HTTPConnection, offered: list[str]) -> list[str]:
    """The credentials a handshake carries: a bearer, a basic password (a Twilio webhook's
    ``https://any:<key>@host/...``), and the subprotocol browsers use."""
    scheme, _, credentials = connection.headers.get("authorization", "").partition(" ")
    presented = [credentials] if scheme.lower() == "bearer" else []
    if scheme.lower() == "basic":
        presented.append(_basic_password(credentials))
    return presented + [p.removeprefix(API_KEY_SUBPROTOCOL) for p in offered if p.startswith(API_KEY_SUBPROTOCOL)]


async def deny(websocket: WebSocket, status: int, code: str, message: str) -> None:
    """Refuse the handshake with ``status`` and a JSON body saying why, where the server can
    send one (else HTTP 403)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(refusal(status, code, message))
    else:
        await websocket.close(CLOSE_POLICY_VIOLATION)


def refusal(status: int, code: str, message: str, param: str | None = None) -> JSONResponse:
    """An HTTP refusal in the shape of the protocol's errors."""
    error = {"type": "invalid_request_error", "code": code, "message": message}
    return JSONResponse({"error": error | ({"param": param} if param else {})}, status_code=status)


def not_served(path: str) -> str:
    return f"{path[:100]!r} is not served here; this server serves " + ", ".join(SERVED_PATHS)


def _basic_password(credentials: str) -> str:
    try:
        return base64.b64decode(credentials, validate=True).decode().partition(":")[2]
    except (binascii.Error, UnicodeDecodeError):
        return ""


def secret_from_env(variable: str | None, setting: str) -> bytes | None:
    """The secret in the environment variable ``variable`` that the config's ``setting``
    names (``None``: none is configured); a name without a value is a deployment mistake."""
    if variable is None:
        return None
    secret = os.environ.get(variable)
    if not secret:
        raise RuntimeError(f"{setting} names {variable!r}, which is not set in the replica's environment")
    return secret.encode()

"""The ingress's Twilio routes: the voice webhook that answers a call with TwiML, and the
media stream that becomes a session (:mod:`deployments.realtime.twilio`).

No credential of the operator's goes to Twilio. The webhook is Twilio's when it carries a
valid ``X-Twilio-Signature`` (with ``ingress.twilio.auth_token_env`` set), else when it
presents the API key (HTTP basic auth, ``https://any:<key>@HOST/...``). Its TwiML hands
the stream a one-use client secret bound to the call (``client_secret``), which expires
in ``STREAM_SECRET_TTL_S``; a media stream carries no headers of ours. An operator's own
TwiML may pass a client secret its backend made instead. The stream is refused (closed
1008, which Twilio's debugger shows) without one, turned away (1013) by a full or draining
replica, as ``/v1/realtime`` is, and counts against ``pending_streams`` until its
``start`` (:mod:`deployments.pending_streams`).
"""

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl

from fastapi import Request, WebSocket
from fastapi.responses import Response

from deployments.access import Access, Admission, refusal, secret_from_env
from deployments.client_secrets import ClientSecrets
from deployments.config import TwilioConfig
from deployments.pending_streams import MadeRoom, PendingStreams
from deployments.realtime.protocol import CLOSE_POLICY_VIOLATION, CLOSE_TRY_AGAIN_LATER
from deployments.realtime.transport import Transport
from deployments.realtime.twilio import MEDIA_STREAM_PATH, BadStream, TwilioTransport, read_start, twiml_connect
from deployments.replica_lifecycle import ReplicaSessions
from deployments.session_opening import SessionOpening
from deployments.twilio_signature import is_signed

logger = logging.getLogger(__name__)

INCOMING_CALL_PATH = "/v1/twilio/incoming-call"
STREAM_SECRET_TTL_S = 60
"""Twilio opens the stream within a second or two of reading the TwiML."""
SECRET_PARAMETER = "client_secret"
MAX_WEBHOOK_BYTES = 16 << 10
"""A voice webhook's form is well under 2 KB."""


class PhoneCalls:
    def __init__(
        self,
        access: Access,
        secrets: ClientSecrets,
        sessions: ReplicaSessions,
        serve: Callable[[Transport, SessionOpening], Awaitable[None]],
        instructions: str | None,
        config: TwilioConfig,
    ) -> None:
        """``serve``: runs a session on a transport; ``instructions``: the server's, which a
        call's ``instructions`` parameter replaces."""
        self._access, self._secrets, self._sessions, self._serve = access, secrets, sessions, serve
        self._instructions = instructions
        self._auth_token = secret_from_env(config.auth_token_env, "ingress.twilio.auth_token_env")
        self._pending = PendingStreams(config.pending_streams)

    async def incoming_call(self, request: Request) -> Response:
        """TwiML connecting the call to this server's media stream, over ``wss``, with a
        secret for that call's stream alone."""
        body = (await request.body())[:MAX_WEBHOOK_BYTES].decode(errors="replace")
        params = dict(parse_qsl(body, keep_blank_values=True))  # Twilio posts a form
        refused = self._webhook_refusal(request, params)
        if refused is not None:
            return refusal(403, "access_refused", refused)
        call_sid = params.get("CallSid") or request.query_params.get("CallSid", "")
        try:
            secret = await self._secrets.mint({}, STREAM_SECRET_TTL_S, one_use=True, call_sid=call_sid)
        except Exception:
            logger.exception("twilio call %s: the session store could not keep its stream's secret", call_sid)
            return refusal(503, "session_store_unavailable", "the session store cannot be reached")
        path = request.url.path.removesuffix(INCOMING_CALL_PATH) + MEDIA_STREAM_PATH  # under any route prefix
        stream_url = str(request.url.replace(scheme="wss", path=path, query="", username=None, password=None))
        return Response(twiml_connect(stream_url, {SECRET_PARAMETER: secret.value}), media_type="text/xml")

    def _webhook_refusal(self, request: Request, params: dict[str, str]) -> str | None:
        if self._auth_token is not None:
            presented = request.headers.get("x-twilio-signature", "")
            if is_signed(self._auth_token, presented, str(request.url), params):
                return None
            return "the request has no valid X-Twilio-Signature for this server's Twilio auth token"
        return self._access.bearer_refusal(request)

    async def media_stream(self, websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            start = await self._pending.first(read_start(websocket))
        except MadeRoom:
            await websocket.close(CLOSE_TRY_AGAIN_LATER, "too many streams waiting for 'start'")
            return
        except BadStream as exc:
            logger.warning("a twilio media stream was refused: %s", exc)
            await websocket.close(CLOSE_POLICY_VIOLATION, str(exc)[:120])
            return
        secret = start.parameters.get(SECRET_PARAMETER, "")
        try:
            grant = await self._secrets.redeem(secret, start.call_sid) if secret else None
        except Exception:
            logger.exception("twilio call %s: the session store could not be asked for its secret", start.call_sid)
            await websocket.close(CLOSE_TRY_AGAIN_LATER, "session_store_unavailable")
            return
        if grant is None and (secret or self._access.key is not None):  # a server with no key takes any call
            logger.warning("twilio call %s refused: no live client secret for it", start.call_sid)
            await websocket.close(CLOSE_POLICY_VIOLATION, "access_refused")
            return
        await self._sessions.watched()
        turned_away = self._sessions.refusal()
        if turned_away is not None:
            logger.warning("twilio call %s turned away: %s", start.call_sid, turned_away.error.message)
            await websocket.close(CLOSE_TRY_AGAIN_LATER, turned_away.error.code or "")
            return
        self._sessions.admit()
        try:
            instructions = start.parameters.get("instructions", self._instructions)
            opening = SessionOpening(Admission(with_key=False, opening=grant["session"] if grant else {}))
            await self._serve(TwilioTransport(websocket, start, instructions), opening)
        finally:
            self._sessions.release()

"""The ingress's Twilio routes: the voice webhook that answers a call with TwiML, and the
media stream that becomes a session (:mod:`deployments.realtime.transports.twilio`).

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
from deployments.config import IngressConfig
from deployments.pending_streams import MadeRoom, PendingStreams
from deployments.realtime.protocol import CLOSE_POLICY_VIOLATION, CLOSE_TRY_AGAIN_LATER
from deployments.realtime.transports.call_control import CallEnding
from deployments.realtime.transports.port import Transport
from deployments.realtime.transports.twilio import (
    MEDIA_STREAM_PATH,
    BadStream,
    CallPlan,
    TwilioTransport,
    read_start,
)
from deployments.realtime.transports.twiml import twiml_connect, twiml_ending, twiml_turned_away
from deployments.replica_lifecycle import ReplicaSessions
from deployments.session_opening import SessionOpening
from deployments.session_store.store import SessionStore
from deployments.session_store.writer import StoredSession
from deployments.twilio_signature import is_signed

logger = logging.getLogger(__name__)

INCOMING_CALL_PATH = "/v1/twilio/incoming-call"
STREAM_SECRET_TTL_S = 60
"""Twilio opens the stream within a second or two of reading the TwiML."""
SECRET_PARAMETER = "client_secret"
MAX_WEBHOOK_BYTES = 16 << 10
"""A voice webhook's form is well under 2 KB."""
MAX_REDIRECTS = 10
"""New streams one call may be brought back for (its TwiML's ``<Redirect>``): a rollout or a
lost replica costs a call one or two; a server that keeps turning it away (1013: every
replica full or draining) would otherwise loop it for ever in silence."""
TURNED_AWAY = "Sorry, we cannot take your call right now. Please call again later."


class StoredCall:
    """A call's standing grant in the session store (:meth:`ClientSecrets.keep_call`), as
    its stream's :class:`CallLine`: what the call's next webhook and stream find."""

    def __init__(self, secrets: ClientSecrets, call_sid: str) -> None:
        self._secrets, self._sid = secrets, call_sid

    async def resumes_with(self, resume_token: str) -> None:
        try:
            await self._secrets.keep_call(self._sid, resume_token=resume_token)
        except Exception:  # the call goes on; a new stream of it starts a new session
            logger.exception("twilio call %s: the session store could not keep its session for a new stream", self._sid)

    async def ends(self, ending: CallEnding) -> None:
        try:
            await self._secrets.keep_call(self._sid, call_ending=str(ending))
        except Exception:
            logger.exception("twilio call %s: the session store could not keep its end (%s)", self._sid, ending)


class PhoneCalls:
    def __init__(
        self,
        access: Access,
        secrets: ClientSecrets,
        store: SessionStore | None,
        sessions: ReplicaSessions,
        serve: Callable[[Transport, SessionOpening], Awaitable[None]],
        config: IngressConfig,
    ) -> None:
        """``serve``: runs a session on a transport; ``config``: the server's instructions
        (which a call's ``instructions`` parameter replaces) and its ``twilio`` settings."""
        self._access, self._secrets, self._store, self._sessions, self._serve = access, secrets, store, sessions, serve
        self._instructions = config.instructions
        self._config = config.twilio
        self._auth_token = secret_from_env(self._config.auth_token_env, "ingress.twilio.auth_token_env")
        self._pending = PendingStreams(self._config.pending_streams)

    async def incoming_call(self, request: Request) -> Response:
        """TwiML for the call: connected to this server's media stream, over ``wss``, with a
        secret for that stream alone, and brought back here when the stream closes; or, once
        its agent has ended it, hung up or dialled on."""
        body = (await request.body())[:MAX_WEBHOOK_BYTES].decode(errors="replace")
        params = dict(parse_qsl(body, keep_blank_values=True))  # Twilio posts a form
        refused = self._webhook_refusal(request, params)
        if refused is not None:
            return refusal(403, "access_refused", refused)
        call_sid = params.get("CallSid") or request.query_params.get("CallSid", "")
        redirects = _count(request.query_params.get("redirects", "0"))
        if redirects >= MAX_REDIRECTS:
            logger.warning("twilio call %s turned away: brought back %d times, no stream kept it", call_sid, redirects)
            return Response(twiml_turned_away(TURNED_AWAY), media_type="text/xml")
        try:
            held = await self._secrets.call(call_sid) if call_sid else None
            ending = CallEnding.parse(held.get("call_ending", "")) if held is not None else None
            if ending is not None:
                return Response(twiml_ending(ending), media_type="text/xml")
            secret = await self._secrets.mint({}, STREAM_SECRET_TTL_S, one_use=True, call_sid=call_sid)
        except Exception:
            logger.exception("twilio call %s: the session store could not keep its stream's secret", call_sid)
            return refusal(503, "session_store_unavailable", "the session store cannot be reached")
        path = request.url.path.removesuffix(INCOMING_CALL_PATH) + MEDIA_STREAM_PATH  # under any route prefix
        stream_url = str(request.url.replace(scheme="wss", path=path, query="", username=None, password=None))
        back = f"{request.url.path}?redirects={redirects + 1}"
        twiml = twiml_connect(stream_url, {SECRET_PARAMETER: secret.value}, redirect_path=back)
        return Response(twiml, media_type="text/xml")

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
            try:
                stored = await self._resumed(start.call_sid)
            except Exception:
                logger.exception("twilio call %s: the session store could not be asked for its session", start.call_sid)
                await websocket.close(CLOSE_TRY_AGAIN_LATER, "session_store_unavailable")
                return
            greeting = start.parameters.get("greeting", self._config.greeting)
            plan = CallPlan(
                self._config.model_copy(update={"greeting": greeting or None}),
                StoredCall(self._secrets, start.call_sid),
                start.parameters.get("instructions", self._instructions),
                resumed=stored is not None,
            )
            admission = Admission(with_key=False, opening=grant["session"] if grant else {})
            await self._serve(TwilioTransport(websocket, start, plan), SessionOpening(admission, stored, True))
        finally:
            self._sessions.release()

    async def _resumed(self, call_sid: str) -> StoredSession | None:
        """The session of the call's last stream, if it had one (a stream closed by a drain,
        a lost replica or the network): the call goes on where it was."""
        held = await self._secrets.call(call_sid)
        token = held.get("resume_token", "") if held is not None else ""
        if not token or self._store is None:
            return None
        stored = await self._store.resumed_session(token, with_key=False)
        if stored is None:
            logger.warning("twilio call %s: its session could not be resumed (expired): a new one starts", call_sid)
        return stored


def _count(text: str) -> int:
    """A redirect count from the URL (anything that is not a small count is none)."""
    return int(text) if text.isdigit() and len(text) < 4 else 0

"""The ingress's Twilio routes: the voice webhook that answers a call with TwiML, and the
media stream that becomes a session (:mod:`deployments.realtime.twilio`).

A number's voice webhook is ``https://any:<key>@HOST/v1/twilio/incoming-call`` (Twilio sends
the key as HTTP basic auth); its TwiML hands the key on to the stream as a ``<Parameter>``,
since a media stream carries no headers of ours. The stream is refused (closed 1008, which
Twilio's debugger shows) without the key, and turned away (1013) by a full or draining
replica, as ``/v1/realtime`` is.
"""

import logging
from collections.abc import Awaitable, Callable

from fastapi import Request, WebSocket
from fastapi.responses import Response

from deployments.access import Access, refusal
from deployments.realtime.protocol import CLOSE_POLICY_VIOLATION, CLOSE_TRY_AGAIN_LATER
from deployments.realtime.transport import Transport
from deployments.realtime.twilio import MEDIA_STREAM_PATH, BadStream, TwilioTransport, read_start, twiml_connect
from deployments.replica_lifecycle import ReplicaSessions

logger = logging.getLogger(__name__)

INCOMING_CALL_PATH = "/v1/twilio/incoming-call"


class PhoneCalls:
    def __init__(
        self,
        access: Access,
        sessions: ReplicaSessions,
        serve: Callable[[Transport], Awaitable[None]],
        instructions: str | None,
    ) -> None:
        """``serve``: runs a session on a transport; ``instructions``: the server's, which a
        call's ``instructions`` parameter replaces."""
        self._access, self._sessions, self._serve = access, sessions, serve
        self._instructions = instructions

    def incoming_call(self, request: Request) -> Response:
        """TwiML connecting the call to this server's media stream, over ``wss``."""
        refused = self._access.refusal(request, [])
        if refused is not None:
            return refusal(403, "access_refused", refused)
        path = request.url.path.removesuffix(INCOMING_CALL_PATH) + MEDIA_STREAM_PATH  # under any route prefix
        stream_url = str(request.url.replace(scheme="wss", path=path, query="", username=None, password=None))
        key = self._access.key
        parameters = {"api_key": key.decode()} if key is not None else {}
        return Response(twiml_connect(stream_url, parameters), media_type="text/xml")

    async def media_stream(self, websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            start = await read_start(websocket)
        except BadStream as exc:
            logger.warning("a twilio media stream was refused: %s", exc)
            await websocket.close(CLOSE_POLICY_VIOLATION, str(exc)[:120])
            return
        refused = self._access.key_refusal([start.parameters.get("api_key", "")])
        if refused is not None:
            logger.warning("twilio call %s refused: %s", start.call_sid, refused)
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
            await self._serve(TwilioTransport(websocket, start, instructions))
        finally:
            self._sessions.release()

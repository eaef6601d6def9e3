"""The ingress's WebRTC routes: a call's SDP offer answered (``POST /v1/realtime/calls``,
as OpenAI's GA API has them) and the STUN/TURN servers the voice page gives its calls;
behind the same key, origin and session cap as ``/v1/realtime``."""

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from cancel import spawn_detached
from deployments.access import Access, refusal
from deployments.realtime.transports.port import Transport
from deployments.realtime.transports.webrtc import BadOffer, IceServers, WebRTCTransport
from deployments.replica_lifecycle import ReplicaSessions
from deployments.session_opening import SessionOpening


class WebRTCCalls:
    def __init__(
        self,
        access: Access,
        sessions: ReplicaSessions,
        serve: Callable[[Transport, SessionOpening], Coroutine[Any, Any, None]],
        ice_servers: IceServers,
    ) -> None:
        """``serve``: runs a session on a transport."""
        self._access, self._sessions, self._serve = access, sessions, serve
        self._ice_servers = ice_servers

    async def call(self, request: Request) -> Response:
        """An SDP offer in (``application/sdp``), the answer out (201), and the session on
        the call's data channel and audio tracks."""
        admitted = await self._access.admit(request, [])
        if isinstance(admitted, str):
            return refusal(403, "access_refused", admitted)
        await self._sessions.watched()
        turned_away = self._sessions.refusal()
        if turned_away is not None:
            return refusal(503, turned_away.error.code or "unavailable", turned_away.error.message)
        offer = (await request.body()).decode(errors="replace")
        try:
            transport, answer = await WebRTCTransport.answer_offer(offer, self._ice_servers.for_server)
        except BadOffer as exc:
            return refusal(400, "invalid_offer", str(exc))
        self._sessions.admit()
        # The call outlives this request: owned by none (a recursive cancel must not end it).
        call = spawn_detached(self._serve(transport, SessionOpening(admitted)))
        call.add_done_callback(lambda _: self._sessions.release())
        return Response(answer, status_code=201, media_type="application/sdp")

    async def ice_servers(self, request: Request) -> JSONResponse:
        """The servers (``ingress.webrtc``), as ``RTCPeerConnection``'s ``iceServers``."""
        admitted = await self._access.admit(request, [])
        if isinstance(admitted, str):
            return refusal(403, "access_refused", admitted)
        return JSONResponse(self._ice_servers.for_page)

"""The WebSocket ingress: ``/v1/realtime`` (OpenAI Realtime), WebRTC calls, Twilio's phone
calls (:mod:`deployments.phone_calls`), the voice page at ``/``, ``/healthz`` and ``/readyz``.

It owns the sessions of its replica: access (an optional API key and allowed origins,
checked before the handshake is accepted, so a refused client gets HTTP 403 and no session
state exists), the session cap (refused with an ``error`` event and a close code, never a
hung handshake), resumes (``?resume_token=``, refused with HTTP 403 before any session
state is touched; :mod:`deployments.session_store.store`), the cancel-scope directory their
scopes live in, and (:mod:`deployments.replica_lifecycle`) the cap, graceful shutdown
(close every socket with 1001) and the drain of a replica being replaced (close with 1012
after ``drain_s``, for clients to resume elsewhere).
"""

import asyncio
import contextlib
import logging

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from ray import serve
from ray.serve.handle import DeploymentHandle

from cancel import spawn_detached
from deployments import telemetry
from deployments.access import Access, chosen_subprotocol, deny, not_served, refusal, secret_from_env
from deployments.app_status import RunningReplicas, metrics_urls_of_nodes
from deployments.client_secret_route import ClientSecretRoute
from deployments.config import IngressConfig, VADStage
from deployments.handles import on_cluster_transport, transport_of
from deployments.messages import TTSRequest
from deployments.metrics import IngressMetrics, SessionMetrics
from deployments.page import add_page
from deployments.phone_calls import INCOMING_CALL_PATH, PhoneCalls
from deployments.placement import replica_placement
from deployments.realtime.failures import StageName
from deployments.realtime.protocol import (
    CLOSE_GOING_AWAY,
    CLOSE_INTERNAL_ERROR,
    CLOSE_TRY_AGAIN_LATER,
    ProtocolError,
    encode,
    error_event,
)
from deployments.realtime.recording.capture import RecordingRequest, Recordings
from deployments.realtime.serve_stages import ServeStages
from deployments.realtime.session import RealtimeSession, SessionStart
from deployments.realtime.session_trace import session_span
from deployments.realtime.settings import SessionSettings
from deployments.realtime.transports.config import TwilioConfig
from deployments.realtime.transports.port import ClientLeft, Transport
from deployments.realtime.transports.twilio import MEDIA_STREAM_PATH
from deployments.realtime.transports.webrtc import IceServers
from deployments.realtime.transports.websocket import WebSocketTransport
from deployments.replica_lifecycle import ReplicaSessions
from deployments.replica_watch import ReplicaWatch
from deployments.scope_directory import SharedScopeDirectory
from deployments.session_opening import SessionOpening
from deployments.session_store.store import SessionStore
from deployments.voice_activity import VADBatcher, in_process, listener_for, on_deployment
from deployments.webrtc_calls import WebRTCCalls
from handlers.synthetic import SyntheticConfig

logger = logging.getLogger(__name__)

RESUME_REFUSED = "this server has no session for this resume token (wrong, expired or used): open a new session"
STORE_UNAVAILABLE = "the session store cannot be reached: try the resume again shortly"

api = FastAPI(title="s2s-serve realtime ingress")
add_page(api)  # before the class's routes: its catch-all must come last


@serve.deployment
@serve.ingress(api)
class RealtimeIngress:
    placement = replica_placement

    def __init__(
        self,
        vad: DeploymentHandle | None,
        turn_end: DeploymentHandle | None,
        stt: DeploymentHandle,
        llm: DeploymentHandle,
        tts: DeploymentHandle,
        config: IngressConfig,
        model_name: str,
        vad_stage: VADStage,
        prompt_budget_tokens: int | None = None,
        synthetic: SyntheticConfig | None = None,
        models_used: dict[str, str] | None = None,
    ) -> None:
        """``vad``: the VAD deployment, or ``None`` to run the detector in this replica;
        ``turn_end``: the end-of-turn model's, or ``None`` (synthetic engines) for its
        stand-in here; ``models_used``: each stage's model, as recorded sessions' reports name them."""
        telemetry.configure("s2s-ingress")
        vad = on_cluster_transport(vad) if vad is not None else None
        turn_end = on_cluster_transport(turn_end) if turn_end is not None else None
        stt, llm, tts = on_cluster_transport(stt), on_cluster_transport(llm), on_cluster_transport(tts)
        run_vad = (
            on_deployment(vad) if vad is not None else in_process(listener_for(synthetic, vad_stage.noise_reduction))
        )
        self._vad = VADBatcher(run_vad, vad_stage.batch_interval_s)
        self._stages = ServeStages(self._vad, turn_end, stt, llm, tts)
        models: dict[StageName, DeploymentHandle] = {"stt": stt, "llm": llm, "tts": tts}
        models |= {"turn_end": turn_end} if turn_end is not None else {}
        self._models = models | ({"vad": vad} if vad is not None else {})
        self._replica_watch = ReplicaWatch(
            {stage: handle.deployment_name for stage, handle in self._models.items()}, config.replica_poll_s
        )
        self._config = config
        self._model_name = model_name
        self._prompt_budget_tokens = prompt_budget_tokens
        key = secret_from_env(config.api_key_env, "ingress.api_key_env")
        self._store, client_secrets = SessionStore.for_app(
            serve.get_replica_context().app_name, config.session_store, key, config.deployment.label_selector
        )
        self._access = Access(key, config.allowed_origins, client_secrets)
        self._client_secret_route = ClientSecretRoute(
            self._access, client_secrets, lambda: SessionSettings.for_new_session(config, model_name)
        )
        self._metrics = IngressMetrics()
        self._sessions = ReplicaSessions(
            config.max_sessions, config.shutdown_poll_s, config.drain_s, self._metrics.active_sessions
        )
        self._sessions.start_watch()  # Serve runs the constructor in the replica's event loop
        ice_servers = IceServers.from_config(config.webrtc.ice_servers)
        self._webrtc_calls = WebRTCCalls(self._access, self._sessions, self._serve, ice_servers)
        self._phone_calls = PhoneCalls(self._access, client_secrets, self._store, self._sessions, self._serve, config)
        self._running_replicas = RunningReplicas(config.shutdown_poll_s)
        self._directory = SharedScopeDirectory(config.scope_placement())
        self._recordings = Recordings(config.recording, models_used, self._metrics.recording_limited)
        self._warming = spawn_detached(self._warm_lines(config.twilio))

    async def _warm_lines(self, calls: TwilioConfig) -> None:
        """Make the audio of the lines every call may hear, so that a call's greeting waits on no model."""
        silence = calls.hang_up_on_silence
        lines = [line for line in (calls.greeting, silence.prompt if silence else None) if line]
        if not lines:
            return
        try:
            scope = await (await self._directory.get()).open_session()
        except Exception:  # check_health reports the directory; calls make their lines themselves
            logger.warning("no cancel scope to synthesise the calls' lines ahead", exc_info=True)
            return
        try:
            await self._stages.lines.warm(lines, lambda text: self._stages.synthesize(TTSRequest(text, scope.ticket())))
        finally:
            with contextlib.suppress(Exception):
                await scope.close()

    @api.get("/healthz")
    async def healthz(self) -> JSONResponse:
        directory = self._directory.built()
        body = {
            "ok": not self._sessions.closing,
            "draining": self._sessions.draining,
            "sessions": len(self._sessions),
            "admitted": self._sessions.admitted,
            "scopes": directory.open_sessions if directory is not None else 0,
            "unavailable": self._replica_watch.down_stages,
        }
        return JSONResponse(body, status_code=503 if self._sessions.closing else 200)

    @api.get("/readyz")
    async def readyz(self) -> JSONResponse:
        """Ready when every model deployment answers (a replica answers once its model has
        loaded) and none is known to have no running replica (``unavailable``: this replica's
        calls to it fail at once): ``make run`` and load balancers wait for this, not for the
        ingress alone. A detector in this replica loaded before it answered anything."""
        await self._sessions.watched()
        answers = await asyncio.gather(*(self._ready(handle) for handle in self._models.values()))
        models = {"vad": True} | dict(zip(self._models, answers, strict=True))
        turning_away = self._sessions.closing or self._sessions.draining
        ready = all(models.values()) and not self._replica_watch.down_stages and not turning_away
        body = {"ready": ready, "models": models, "unavailable": self._replica_watch.down_stages}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def _ready(self, model: DeploymentHandle) -> bool:
        call = model.ready.remote()
        try:
            async with asyncio.timeout(self._config.ready_timeout_s):
                return bool(await call)
        except Exception:
            call.cancel()
            return False

    async def check_health(self) -> None:
        """Serve replaces this replica if it cannot open cancel scopes for new sessions."""
        if self._directory.failed():
            raise RuntimeError("the cancel-scope directory could not be created")

    @api.get("/stats/turns")
    async def turns(self) -> JSONResponse:
        """Where the time of this replica's recent responses went, step by step, in ms from
        the end of the user's turn (``deployments.realtime.timeline``); newest last."""
        return JSONResponse(list(self._metrics.recent_turns))

    @api.get("/stats")
    async def stats(self) -> JSONResponse:
        """For load tests and dashboards: this replica's sessions, the application's running
        replicas per deployment (as of up to ``shutdown_poll_s`` ago), where Ray exports the
        Prometheus metrics, and what calls to the models go over (``grpc`` or ``ray``)."""
        replicas = await self._running_replicas.get()
        metrics_urls = await asyncio.to_thread(metrics_urls_of_nodes)
        body = {"sessions": len(self._sessions), "replicas": replicas, "metrics_urls": metrics_urls}
        return JSONResponse(body | {"calls_over": transport_of(self._stages.tts)})

    @api.websocket("/v1/realtime")
    async def realtime(self, websocket: WebSocket) -> None:
        offered: list[str] = websocket.scope.get("subprotocols", [])
        token = websocket.query_params.get("resume_token")
        try:
            admitted = await self._access.admit(websocket, offered, resuming=token is not None)
        except Exception:  # a client secret could not be looked up
            logger.exception("the session store could not be asked for a client secret")
            await deny(websocket, 503, "session_store_unavailable", STORE_UNAVAILABLE)
            return
        if isinstance(admitted, str):
            await deny(websocket, 403, "access_refused", admitted)  # before accept: no session state
            return
        await self._sessions.watched()
        refusal = self._sessions.refusal()
        if refusal is not None:  # before a resume: a refused client keeps its token
            await websocket.accept(subprotocol=chosen_subprotocol(offered))
            await websocket.send_text(encode(refusal))
            self._metrics.error_sent(refusal)
            code = CLOSE_GOING_AWAY if self._sessions.closing else CLOSE_TRY_AGAIN_LATER
            await websocket.close(code, refusal.error.code)
            return
        self._sessions.admit()
        try:
            stored = None
            if token is not None:
                try:
                    stored = await self._store.resumed_session(token, admitted.with_key) if self._store else None
                except Exception:
                    logger.exception("the session store could not be asked for a resume")
                    await deny(websocket, 503, "session_store_unavailable", STORE_UNAVAILABLE)
                    return
                if stored is None:
                    await deny(websocket, 403, "resume_refused", RESUME_REFUSED)
                    return
            opening = SessionOpening(
                admitted,
                stored,
                drain_notice=websocket.query_params.get("drain_notice") in ("1", "true"),
                record=websocket.query_params.get("record") in ("1", "true"),
            )
            try:
                await websocket.accept(subprotocol=chosen_subprotocol(offered))
            except Exception:  # the client left mid-handshake: a resume's record goes back to its token
                if stored is not None and self._store is not None:
                    await self._store.unstarted(stored.session_id, admitted.with_key)
                raise
            await self._serve(WebSocketTransport(websocket), opening)
        finally:
            self._sessions.release()

    @api.post("/v1/realtime/client_secrets")
    async def client_secrets(self, request: Request) -> JSONResponse:
        return await self._client_secret_route.create(request)

    @api.post("/v1/realtime/calls")
    async def calls(self, request: Request) -> Response:
        return await self._webrtc_calls.call(request)

    @api.get("/v1/realtime/ice-servers")
    async def ice_servers(self, request: Request) -> JSONResponse:
        return await self._webrtc_calls.ice_servers(request)

    @api.api_route(INCOMING_CALL_PATH, methods=["GET", "POST"])
    async def twilio_incoming_call(self, request: Request) -> Response:
        return await self._phone_calls.incoming_call(request)

    @api.websocket(MEDIA_STREAM_PATH)
    async def twilio_media_stream(self, websocket: WebSocket) -> None:
        await self._phone_calls.media_stream(websocket)

    # Last, so that they match only what no route above does.
    @api.websocket("/{path:path}")
    async def unknown_websocket(self, websocket: WebSocket, path: str) -> None:
        await deny(websocket, 404, "not_found", not_served(websocket.url.path))

    @api.api_route("/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
    async def unknown_path(self, request: Request, path: str) -> JSONResponse:
        return refusal(404, "not_found", not_served(request.url.path))

    async def _serve(self, transport: Transport, opening: SessionOpening) -> None:
        """Serve one session: ``opening.stored`` if it resumes one, else a new one (whose
        record is kept when the server has a store). However the session ends, or fails to
        start, its record is released."""
        stored = opening.stored
        with_key = opening.admission.with_key
        if stored is None and self._store is not None:
            try:
                stored = await self._store.new_session(with_key)
            except Exception:  # the call goes on; it cannot be resumed (no resume_token)
                logger.exception("the session store could not keep a new session's record")
        started = False
        try:
            try:
                scope = await (await self._directory.get()).open_session()
            except Exception:
                logger.exception("no cancel scope for a new session")
                await self._unavailable(transport)
                return
            metrics = SessionMetrics(self._metrics)
            start = SessionStart(
                model_name=self._model_name,
                prompt_budget_tokens=self._prompt_budget_tokens,
                watch=self._replica_watch,
                stored=stored,
                drain_notice=opening.drain_notice,
                recording=RecordingRequest(self._recordings, opening.record),
            )
            session = RealtimeSession(transport, self._stages, self._config, scope, metrics, start)
            resumed = stored is not None and stored.resumed is not None
            if opening.admission.opening and not resumed:  # a resumed session has its own settings
                session.open_with(opening.admission.opening)
            try:
                with session_span(session.id, resumed, lambda: session.settings.tracing):
                    async with self._sessions.holding(session):
                        started = True
                        await session.run()
            finally:
                metrics.flush()
                with contextlib.suppress(Exception):  # a host lost for good has lost the scope anyway
                    await scope.close()
        finally:
            if stored is not None and self._store is not None:
                if started:
                    self._store.started(stored.session_id)
                    self._store.closed(stored.session_id)
                else:
                    await self._store.unstarted(stored.session_id, with_key)

    async def _unavailable(self, transport: Transport) -> None:
        error = ProtocolError("session_unavailable", "the server could not open a session; try again later")
        unavailable = error_event(error, "server_error")
        with contextlib.suppress(ClientLeft):
            await transport.send(unavailable)
        self._metrics.error_sent(unavailable)
        await transport.close(CLOSE_INTERNAL_ERROR, error.code)

    async def __del__(self) -> None:
        self._warming.cancel()
        await self._sessions.close_all()
        await self._recordings.written()
        self._vad.close()
        if (directory := self._directory.built()) is not None:
            await directory.shutdown()

"""The WebSocket ingress: ``/v1/realtime`` (OpenAI Realtime) and ``/healthz``.

It owns the sessions of its replica: the session cap (refused with an ``error`` event and
a close code, never a hung handshake), the cancel-scope directory their scopes live in,
and graceful shutdown (stop accepting, end responses, close every socket with 1001).
"""

import asyncio
import logging
from typing import Any

import ray

from fastapi import FastAPI, WebSocket
from fastapi.responses import JSONResponse
from openai.types.realtime import RealtimeErrorEvent
from ray import serve
from ray.serve.handle import DeploymentHandle

from cancel import ScopeDirectory, spawn_detached
from deployments.config import IngressConfig
from deployments.metrics import IngressMetrics, SessionMetrics
from deployments.protocol import ProtocolError, encode, error_event
from deployments.session import RealtimeSession, Stages

log = logging.getLogger(__name__)

CLOSE_GOING_AWAY = 1001
CLOSE_TRY_AGAIN_LATER = 1013

api = FastAPI(title="s2s-serve realtime ingress")


def _cluster_view() -> dict[str, Any]:
    """Running replicas per deployment of this application, and Ray's metrics endpoints."""
    app = serve.status().applications.get(serve.get_replica_context().app_name)
    replicas = {
        name: deployment.replica_states.get("RUNNING", 0) for name, deployment in (app.deployments if app else {}).items()
    }
    metrics_urls = [
        f"http://{node['NodeManagerAddress']}:{node['MetricsExportPort']}/metrics"
        for node in ray.nodes()
        if node.get("Alive") and node.get("MetricsExportPort")
    ]
    return {"replicas": replicas, "metrics_urls": metrics_urls}


@serve.deployment
@serve.ingress(api)
class RealtimeIngress:
    def __init__(
        self,
        vad: DeploymentHandle,
        stt: DeploymentHandle,
        llm: DeploymentHandle,
        tts: DeploymentHandle,
        config: IngressConfig,
        model_name: str,
    ) -> None:
        self._stages = Stages(vad, stt, llm, tts)
        self._config = config
        self._model_name = model_name
        self._sessions: set[RealtimeSession] = set()
        self._metrics = IngressMetrics()
        self._directory: asyncio.Task[ScopeDirectory] | None = None
        self._shutdown_watch: asyncio.Task[None] | None = None
        self._closing = False

    @api.get("/healthz")
    async def healthz(self) -> JSONResponse:
        directory = self._directory.result() if self._directory is not None and self._directory.done() else None
        body = {
            "ok": not self._closing,
            "sessions": len(self._sessions),
            "scopes": directory.open_sessions if directory is not None else 0,
        }
        return JSONResponse(body, status_code=503 if self._closing else 200)

    @api.get("/stats")
    async def stats(self) -> JSONResponse:
        """For load tests and dashboards: this replica's sessions, the application's running
        replicas per deployment, and where Ray exports the Prometheus metrics.
        Costs a Serve status call (~50 ms of CPU): poll it every few seconds, not faster."""
        return JSONResponse({"sessions": len(self._sessions), **await asyncio.to_thread(_cluster_view)})

    @api.websocket("/v1/realtime")
    async def realtime(self, websocket: WebSocket) -> None:
        await websocket.accept()
        refusal = self._refusal()
        if refusal is not None:
            await websocket.send_text(encode(refusal))
            await websocket.close(CLOSE_GOING_AWAY if self._closing else CLOSE_TRY_AGAIN_LATER, refusal.error.code)
            return
        directory = await self._scope_directory()
        session = RealtimeSession(
            websocket,
            self._stages,
            self._config,
            directory.open_session(),
            self._model_name,
            SessionMetrics(self._metrics),
        )
        self._sessions.add(session)
        self._metrics.active_sessions.set(len(self._sessions))
        self._watch_for_shutdown()
        try:
            await session.run()
        finally:
            self._sessions.discard(session)
            self._metrics.active_sessions.set(len(self._sessions))

    def _refusal(self) -> RealtimeErrorEvent | None:
        if self._closing:
            return error_event(ProtocolError("server_shutting_down", "the server is shutting down"), "server_error")
        if len(self._sessions) >= self._config.max_sessions:
            return error_event(
                ProtocolError(
                    "session_limit_reached",
                    f"this server holds its maximum of {self._config.max_sessions} sessions; try again later",
                ),
                "server_error",
            )
        return None

    def _scope_directory(self) -> "asyncio.Task[ScopeDirectory]":
        """Started with the first session, off every later session's critical path."""
        if self._directory is None:  # shared by every session: owned by none of their requests
            self._directory = spawn_detached(ScopeDirectory.create(self._config.scope))
        return self._directory

    def _watch_for_shutdown(self) -> None:
        """Serve drains a replica by waiting for its requests to end, and an open WebSocket
        never ends by itself; so while sessions are open the ingress watches its
        application's status and, once it is being deleted, closes them itself."""
        if self._shutdown_watch is None or self._shutdown_watch.done():
            self._shutdown_watch = asyncio.ensure_future(self._shutdown_watch_loop())

    async def _shutdown_watch_loop(self) -> None:
        app_name = serve.get_replica_context().app_name
        while self._sessions and not self._closing:
            await asyncio.sleep(self._config.shutdown_poll_s)
            status = await asyncio.to_thread(serve.status)
            app = status.applications.get(app_name)
            if app is None or app.status == "DELETING":
                await self._close_all()

    async def _close_all(self) -> None:
        self._closing = True
        await asyncio.gather(
            *(s.close(CLOSE_GOING_AWAY, "server shutting down") for s in list(self._sessions)),
            return_exceptions=True,
        )

    async def __del__(self) -> None:
        await self._close_all()
        if self._directory is not None and self._directory.done() and not self._directory.exception():
            await self._directory.result().shutdown()


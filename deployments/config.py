"""Configuration of the whole application, as Serve config files pass it to ``build_app``.

One model per stage: each has its handler's settings and its deployment's Serve options,
so a cluster profile can give every model its own GPU and scale TTS independently.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cancel import ScopePlacementConfig
from deployments.realtime.recording.config import RecordingConfig
from deployments.realtime.session_config import SessionConfig
from deployments.realtime.transports.config import TwilioConfig, WebRTCConfig
from deployments.session_store.config import SessionStoreConfig
from handlers.denoise import NoiseReductionConfig
from handlers.llm import LLMConfig
from handlers.stt import STTConfig
from handlers.synthetic import SyntheticConfig
from handlers.tts import TTSConfig
from handlers.turn_end import TurnEndConfig


class DeploymentOptions(BaseModel):
    """The Serve options a profile may set for one deployment."""

    model_config = ConfigDict(extra="forbid")

    num_replicas: int | Literal["auto"] | None = 1
    num_cpus: float = Field(1.0, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    max_ongoing_requests: int = 16
    autoscaling_config: dict[str, Any] | None = None
    graceful_shutdown_timeout_s: float = 20.0
    access_log: bool = False
    """Serve logs every call by default; per audio frame or token that costs real CPU."""
    label_selector: dict[str, str] | None = None
    """Ray node labels a replica needs (a KubeRay worker group's ``labels``). The GPU profile
    keeps the ingress and VAD on CPU pods with it: Serve spreads replicas over every node
    with room, and an ingress on a lost GPU pod would drop its sessions' WebSockets."""

    def serve_options(self) -> dict[str, Any]:
        actor: dict[str, Any] = {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus}
        if self.label_selector is not None:
            actor["label_selector"] = self.label_selector
        options: dict[str, Any] = {
            "ray_actor_options": actor,
            "max_ongoing_requests": self.max_ongoing_requests,
            "graceful_shutdown_timeout_s": self.graceful_shutdown_timeout_s,
            "logging_config": {"enable_access_log": self.access_log},
        }
        if self.autoscaling_config is not None:
            options["autoscaling_config"] = self.autoscaling_config
        else:
            options["num_replicas"] = self.num_replicas
        return options


class IngressConfig(SessionConfig):
    """The ingress: its sessions' defaults (:class:`SessionConfig`), and how the replica
    admits, places, drains, records and stores them."""

    model_config = ConfigDict(extra="forbid")

    deployment: DeploymentOptions = DeploymentOptions(num_cpus=0.25, max_ongoing_requests=64)
    max_sessions: int = Field(32, ge=1)
    """Per ingress replica; the next client gets an ``error`` (``session_limit_reached``)."""
    scope: ScopePlacementConfig = ScopePlacementConfig()
    """Where session scopes live; the host actors need the ingress's node labels unless given
    their own (``scope_placement``)."""
    api_key_env: str | None = None
    """Name of an environment variable holding the API key clients must present (as
    ``Authorization: Bearer <key>``, or the ``openai-insecure-api-key.<key>`` subprotocol that
    browsers use); ``None``: no key. The replica fails to start if the variable is unset."""
    allowed_origins: list[str] | None = None
    """Origins a browser may connect from (``None``: any). Clients that send no ``Origin``
    header (SDKs, servers) are not browsers and are not checked."""
    ready_timeout_s: float = Field(2.0, gt=0)
    """How long ``/readyz`` waits for each model deployment to answer."""
    webrtc: WebRTCConfig = WebRTCConfig()
    """STUN/TURN servers for ``POST /v1/realtime/calls``."""
    shutdown_poll_s: float = Field(1.0, gt=0)
    """How often open sessions check for a shutdown (one ~1 ms controller call per ingress
    replica). Under the HAProxy data path a stopped replica keeps its HTTP server
    ``drain_s + shutdown_poll_s`` and 2 s more (``RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S``,
    set from these by the launcher and the chart), so the drain ends before it."""
    drain_s: float = Field(10.0, gt=0)
    """How long a replica being replaced (a new version, a scale-down) keeps its open
    sessions before it closes them with 1012 for their clients to resume elsewhere; below the
    ingress's ``graceful_shutdown_timeout_s``, when Serve kills the replica."""
    session_store: SessionStoreConfig = SessionStoreConfig()
    """Where sessions' records live, so a client that lost its socket can resume its session
    on any replica (``docs/reliability.md``)."""
    replica_poll_s: float = Field(0.5, gt=0)
    """How long a call may wait for its first output before the ingress asks the controller
    whether its deployment has a running replica (one that died between calls fails none),
    and, after a model replica died, how often it asks again (one ~1 ms call per ingress
    replica, only then); meanwhile calls to a deployment with none fail at once
    (``deployments.replica_watch``)."""
    recording: RecordingConfig = RecordingConfig()
    """Opt-in recording of sessions and their reports (off by default: no ``directory``)."""
    twilio: TwilioConfig = TwilioConfig()

    def scope_placement(self) -> ScopePlacementConfig:
        """``scope``, its hosts beside the ingress that owns them unless told otherwise: a host
        on a GPU pod would restart elsewhere with that pod (seen on the simulated cluster)."""
        if self.scope.label_selector is not None or self.deployment.label_selector is None:
            return self.scope
        return self.scope.model_copy(update={"label_selector": self.deployment.label_selector})

    @model_validator(mode="after")
    def _room_for_refusals(self) -> "IngressConfig":
        # An open WebSocket holds one of max_ongoing_requests for its whole life: at the cap
        # the next client would hang in the handshake instead of getting our refusal.
        if self.deployment.max_ongoing_requests <= self.max_sessions:
            raise ValueError(
                f"ingress max_ongoing_requests ({self.deployment.max_ongoing_requests}) must exceed "
                f"max_sessions ({self.max_sessions}) so extra clients are refused, not left hanging"
            )
        if self.drain_s + self.shutdown_poll_s >= self.deployment.graceful_shutdown_timeout_s:
            raise ValueError(
                f"ingress drain_s ({self.drain_s:g}) plus shutdown_poll_s ({self.shutdown_poll_s:g}) must be under "
                f"its graceful_shutdown_timeout_s ({self.deployment.graceful_shutdown_timeout_s:g}), when Serve "
                "kills the replica: the drain's sessions would be cut, not closed for their clients to resume"
            )
        return self


class VADStage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    placement: Literal["ingress", "deployment"] = "ingress"
    """Where the detector runs: in each ingress replica (``ingress``: no call leaves the
    process, as in every peer), or on the VAD deployment (``deployment``: one call per tick
    per ingress replica, for clusters that keep models off the ingress's nodes). The
    ``deployment`` options below apply only to the latter."""
    batch_interval_s: float = Field(0.03, gt=0, le=0.5)
    """One detector run per this interval per ingress replica serves every session's new
    audio (``deployments.voice_activity``): longer batches more and answers later."""
    deployment: DeploymentOptions = DeploymentOptions(num_cpus=0.1, max_ongoing_requests=64)
    noise_reduction: NoiseReductionConfig = NoiseReductionConfig()
    """The denoiser for sessions that ask for ``noise_reduction`` (``handlers.denoise``): it
    runs where the detector runs, in the same batch."""


class TurnEndStage(BaseModel):
    """Smart Turn, the end-of-turn model that serves ``semantic_vad`` (``handlers.turn_end``)."""

    model_config = ConfigDict(extra="forbid")
    deployment: DeploymentOptions = DeploymentOptions(num_cpus=0.05, max_ongoing_requests=16)
    """A small share: ~45 ms of CPU at each end of a ``semantic_vad`` turn. On 2 CPUs the
    other shares leave little (the test suite's apps once could not be scheduled at 0.1)."""
    handler: TurnEndConfig = TurnEndConfig()


class STTStage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    deployment: DeploymentOptions = DeploymentOptions(num_cpus=0.25, max_ongoing_requests=8)
    handler: STTConfig = STTConfig()


class LLMStage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    deployment: DeploymentOptions = DeploymentOptions(num_cpus=1.0, max_ongoing_requests=32)
    delta_interval_s: float = Field(0.03, ge=0, le=0.5)
    """The LLM's deltas within this long of the last one sent cross Serve as one item (the
    first at once): fewer Serve stream items per answer (``deployments.coalesce``)."""
    handler: LLMConfig = LLMConfig()


class TTSStage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    deployment: DeploymentOptions = DeploymentOptions(num_cpus=0.25, max_ongoing_requests=16)
    handler: TTSConfig = TTSConfig()


class AppConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ingress: IngressConfig = IngressConfig()
    vad: VADStage = VADStage()
    turn_end: TurnEndStage = TurnEndStage()
    stt: STTStage = STTStage()
    llm: LLMStage = LLMStage()
    tts: TTSStage = TTSStage()
    synthetic: SyntheticConfig | None = None
    """Load-testing the serving layer only: synthetic engines in place of the four models
    (``handlers.synthetic``; ``cluster/loadtest.yaml``). Never set it to serve users."""

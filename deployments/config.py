"""Configuration of the whole application, as Serve config files pass it to ``build_app``.

One model per stage: each has its handler's settings and its deployment's Serve options,
so a cluster profile can give every model its own GPU and scale TTS independently.
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cancel import ScopePlacementConfig
from deployments.realtime.recording.config import RecordingConfig
from deployments.realtime.transports.call_control import CallControlConfig
from deployments.realtime.turn_taking.interruptions import InterruptionRules
from deployments.session_store.store import SessionStoreConfig
from handlers.denoise import NoiseReductionConfig, NoiseReductionType
from handlers.instructions import VOICE_INSTRUCTIONS
from handlers.llm import LLMConfig
from handlers.stt import STTConfig
from handlers.synthetic import SyntheticConfig
from handlers.text import FIRST_CHUNK_MAX_WORDS, LOW_LEAD_MS
from handlers.tts import TTSConfig
from handlers.turn_end import TurnEndConfig
from handlers.vad import TurnDetection


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


class InputLimits(BaseModel):
    """What one client may send (``deployments.realtime.limits`` enforces it; ``docs/reliability.md``
    lists every limit)."""

    model_config = ConfigDict(extra="forbid")

    max_event_bytes: int = Field(1 << 20, ge=1024, lt=16 << 20)
    """Largest client event (a WebSocket message). Serve's proxy closes messages over 16 MiB
    with 1009 before the app sees them; this limit sits below that one, so it is ours and
    answered with an ``error``. 1 MiB of base64 is ~21 s of 24 kHz PCM16."""
    audio_rate: float = Field(2.0, gt=0)
    """Audio accepted per second of wall time, in seconds of audio, once the burst is spent."""
    audio_burst_s: float = Field(20.0, gt=0)
    """Audio a client may send at once (it then gets ``audio_rate``): a recorded question
    sent whole is accepted. Keep it below ``max_queued_audio_s``, or a burst alone could
    overflow the backlog while the VAD works through it."""
    events_per_s: float = Field(200.0, gt=0)
    """Client events of any type per second, once ``event_burst`` is spent (audio is usually
    sent as 20-100 ms chunks: 10-50 events per second)."""
    event_burst: int = Field(400, ge=1)
    max_queued_audio_s: float = Field(30.0, gt=0)
    """Audio waiting for the VAD; only a VAD that falls behind lets it grow."""
    strikes: int = Field(20, ge=1)
    """Refused events within ``strike_window_s`` that close the session (1008)."""
    strike_window_s: float = Field(10.0, gt=0)


class IceServer(BaseModel):
    """A STUN or TURN server for WebRTC calls, as a browser's ``RTCIceServer`` names one."""

    model_config = ConfigDict(extra="forbid")

    urls: list[str] = Field(min_length=1)
    """``stun:host:port`` or ``turn:host:port?transport=udp`` (``turns:`` for TLS)."""
    username: str | None = None
    credential_env: str | None = None
    """Name of an environment variable holding the TURN credential (a Secret in the chart);
    the replica fails to start if it is unset."""
    offer_to_page: bool = True
    """Also give it to the voice page (``GET /v1/realtime/ice-servers``), credential
    included: offer only credentials meant for browsers."""


class WebRTCConfig(BaseModel):
    """Where a call's media can meet when the ingress's own addresses are not reachable over
    UDP from the caller (pods on Kubernetes): the server gathers candidates through these
    servers, and the voice page offers its own through those it is given. Empty (the
    default): host candidates only, which is all a local machine needs."""

    model_config = ConfigDict(extra="forbid")

    ice_servers: list[IceServer] = []


class TwilioConfig(CallControlConfig):
    """Phone calls through Twilio (``docs/telephony.md``): what the calls do beyond the
    conversation (:class:`CallControlConfig`), and how their webhook and streams are let in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    auth_token_env: str | None = None
    """Name of an environment variable holding the Twilio account's auth token (a Secret in
    the chart): the voice webhook is then checked by its ``X-Twilio-Signature`` and needs no
    API key in its URL. Without it, the webhook needs the API key (HTTP basic auth)."""
    pending_streams: int = Field(32, ge=1)
    """Media streams per replica still waiting for their ``start`` (not yet authenticated):
    the ingress's default ``max_ongoing_requests`` (64) less its ``max_sessions`` (32). A new
    one over this closes the oldest, so a flood of silent sockets cannot hold the replica's
    requests; at 8, a flood of 70 sockets a second on 2 cores closed a real call's stream
    before its ``start`` was read (1 run in 8)."""


class IngressConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    deployment: DeploymentOptions = DeploymentOptions(num_cpus=0.25, max_ongoing_requests=64)
    max_sessions: int = Field(32, ge=1)
    """Per ingress replica; the next client gets an ``error`` (``session_limit_reached``)."""
    instructions: str | None = VOICE_INSTRUCTIONS
    """The sessions' default system prompt, shown in ``session.created``; a client's own
    replace it. Written for speech (``handlers.instructions``); ``None`` keeps the model's
    own chat-template default."""
    turn_detection: TurnDetection = TurnDetection()
    noise_reduction: NoiseReductionType | None = None
    """A new session's ``audio.input.noise_reduction`` (``near_field``, ``far_field``, or
    ``None``: off, OpenAI's default); sessions may set their own. Phone callers cannot ask:
    this is how an operator denoises their calls."""
    interruption: InterruptionRules = InterruptionRules()
    """When speech during an answer interrupts it (sessions may set their own:
    ``turn_detection.interruption``)."""
    scope: ScopePlacementConfig = ScopePlacementConfig()
    """Where session scopes live; the host actors need the ingress's node labels unless given
    their own (``scope_placement``)."""
    max_input_audio_s: float = Field(60.0, gt=0)
    """Longest utterance kept in ``input_audio_buffer`` (older audio is dropped)."""
    limits: InputLimits = InputLimits()
    """What one client may send: event size and rate, audio rate and backlog."""
    max_item_chars: int = Field(4000, ge=1)
    """Longest text of a ``conversation.item.create`` item and of ``instructions``."""
    stage_timeout_s: float = Field(15.0, gt=0)
    """Longest wait for a model stage's next result (a transcript, the LLM's next delta, the
    TTS's next chunk) before the response fails: a stage that hangs is a failure the client
    hears about within this time. Mind the LLM's first delta on a long prompt on CPU."""
    outgoing_events: int = Field(256, ge=8)
    """Per-session send queue: a slow client slows its own response, nobody else's."""
    first_chunk_words: int = Field(FIRST_CHUNK_MAX_WORDS, ge=1)
    """Words that start speaking when the reply has no clause break yet: fewer start
    sooner, at some cost in prosody."""
    answer_tokens: int | None = Field(24, ge=1)
    """Past this many tokens an answer whose client set no ``max_output_tokens`` ends with its
    sentence: voice answers stay short and end whole, below the LLM's cap
    (``llm.handler.max_tokens``). ``None``: answers run to that cap. Chosen on the quality
    benchmark (docs/bench/quality.md)."""
    low_lead_ms: float | None = Field(LOW_LEAD_MS, gt=0)
    """When the audio of an answer ready to play falls below this, its next piece goes out
    before its sentence ends (a clause, or the words so far), so a listener hears no
    silence inside an answer (docs/bench/quality.md); ``None``: later pieces are whole
    sentences, whatever the wait."""
    audio_delta_ms: int = Field(100, ge=10)
    """Size of each ``response.output_audio.delta``."""
    prefill_while_listening: bool = True
    """While the user speaks, have the LLM compute the conversation so far, so the answer's
    prompt finds it in vLLM's prefix cache (the replica that serves the answer may differ
    when the LLM has several: then it only costs that prefill)."""
    partial_transcript_interval_s: float | None = Field(1.0, gt=0)
    """While the user speaks, transcribe the utterance so far this often and send the words
    it adds as ``…input_audio_transcription.delta`` (``None``: one delta once transcribed).
    Never while the turn may be ending (a pause): then the STT works for the answer."""
    history_items: int = Field(40, ge=2)
    """Conversation items kept for the LLM prompt (oldest dropped first)."""
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

"""What the transports take from the server's config: WebRTC's ICE servers, and a phone
call's behaviour beyond the conversation with how Twilio's webhook and streams are let in."""

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_GREETING = "Hello! How can I help you today?"
PHONE_NUMBER = r"^(\+[1-9][0-9]{6,14}|sips?:[^\s<>&\"']+)$"
"""E.164 (``+15551234567``), or a SIP URI: what ``<Dial>`` takes."""


class HangUpOnSilence(BaseModel):
    """A caller silent for ``prompt_after_s`` after the agent's last words is asked
    ``prompt``; silent ``hang_up_after_s`` more, the call ends."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_after_s: float = Field(10.0, ge=1.0)
    prompt: str = Field("Are you still there?", min_length=1, max_length=200)
    hang_up_after_s: float = Field(10.0, ge=1.0)


class CallControlConfig(BaseModel):
    """A call's behaviour beyond the conversation; everything but the greeting is off
    unless set (``ingress.twilio``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    greeting: str | None = Field(DEFAULT_GREETING, max_length=500)
    """Said as soon as the call's stream starts, before the caller speaks (``None``: the
    caller speaks first). A call's ``greeting`` parameter replaces it (``""``: none)."""
    end_call: bool = False
    """Offer the model ``end_call``: the call ends once the agent's sentence has played."""
    transfer_to: str | None = Field(None, pattern=PHONE_NUMBER)
    """Offer the model ``transfer_call``: the call is dialled on to this number (``<Dial>``)
    once the agent's sentence has played."""
    hang_up_on_silence: HangUpOnSilence | None = None


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

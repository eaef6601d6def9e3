"""Where sessions' records live, as the server's config says (``ingress.session_store``)."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SessionStoreConfig(BaseModel):
    """Where sessions' records live, so that a dropped client can resume (``none``: nowhere,
    and no ``resume_token`` is given)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["ray", "redis", "none"] = "ray"
    resume_window_s: float = Field(300.0, gt=0)
    """How long a record outlives its session's last sign of life. Five minutes covers a
    phone changing networks, a laptop waking, and a drained call's client reconnecting,
    while a store of 120 sessions a replica holds only minutes of ended calls."""
    redis_url_env: str = "S2S_REDIS_URL"
    """For ``redis``: the environment variable that holds the server's URL
    (``redis://[:password@]host:6379/0``; the chart sets it). A URL can carry a password,
    so it is never written in the config."""
    secret_env: str = "S2S_SESSION_SECRET"
    """The environment variable holding the session secret that keys the digests the store
    keeps (the chart makes it a Secret). Needed by ``redis``; ``ray`` makes its own when unset."""

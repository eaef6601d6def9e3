"""What every part of a session shares, handed over as one: the :class:`SessionKit`.

A part takes the kit and at most a few collaborators of its own, so a new shared service is
one field here, not a thread through every constructor. The kit holds only what most parts
use (the outbox, the task spawner, the stages, the conversation, the playback, the settings,
the metrics), it is frozen, and it has no behaviour of its own. :func:`build_kit` is the one
way to make it: the session and the tests' rig both call it.
"""

from collections.abc import Callable
from dataclasses import dataclass

from deployments.metrics import SessionMetrics
from deployments.realtime.conversation import Conversation
from deployments.realtime.outbox import Outbox, Outgoing
from deployments.realtime.playback import Playback
from deployments.realtime.session_config import SessionConfig
from deployments.realtime.settings import SessionSettings
from deployments.realtime.stages import Stages
from deployments.realtime.supervision import Spawn
from deployments.realtime.transports.audio_out import CLEAR_AUDIO, AudioOut
from deployments.realtime.transports.port import SendEvent


@dataclass(frozen=True, slots=True)
class SessionKit:
    outbox: Outbox
    spawn: Spawn
    stages: Stages
    conversation: Conversation
    playback: Playback
    settings: SessionSettings
    metrics: SessionMetrics


@dataclass(frozen=True, slots=True)
class KitPorts:
    """Where the kit's outbox sends: the transport's ``send`` and audio port, and who is told
    of each event sent (metrics, the resume record, a recording)."""

    send: SendEvent
    audio: AudioOut
    on_sent: Callable[[Outgoing], None] = lambda event: None


def build_kit(
    config: SessionConfig,
    settings: SessionSettings,
    stages: Stages,
    metrics: SessionMetrics,
    spawn: Spawn,
    ports: KitPorts,
) -> SessionKit:
    """A session's kit: its outbox and playback on ``ports``, its conversation sized by ``config``."""
    outbox = Outbox(ports.send, ports.audio, config.outgoing_events, ports.on_sent, metrics.dropped)
    playback = Playback(ports.audio, lambda: outbox.put(CLEAR_AUDIO), lambda: settings.interruption.audio_lead_ms)
    return SessionKit(outbox, spawn, stages, Conversation(config.history_items), playback, settings, metrics)

"""The OpenAI Realtime session, in parts with one job each (see ``session.py`` for the flow)."""

from deployments.realtime.session import RealtimeSession
from deployments.realtime.stages import ServeStages, Stages

__all__ = ["RealtimeSession", "ServeStages", "Stages"]

"""Realtime session parts (one job per module; session.py shows the flow)."""

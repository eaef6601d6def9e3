"""Runs that start a cluster or change one under load, and the one launcher they share (``launch``)."""

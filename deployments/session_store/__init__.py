"""Sessions' records outside the ingress replicas, so a session resumes on any replica
(face: :mod:`.store`)."""

"""Recording a session's audio and report (face: :mod:`.capture`)."""

"""Responses: an answer's run from the LLM to the transport (face: :mod:`.responder`)."""

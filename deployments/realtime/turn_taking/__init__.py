"""Turn-taking: what the caller's speech means for the conversation and the answer
(face: :mod:`.taker`)."""

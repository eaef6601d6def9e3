"""Model handlers for the voice pipeline: VAD, STT, LLM, TTS and the audio/text glue.

Nothing here imports Ray: every handler is usable and testable in a plain process, and
cancellation is a plain ``is_stale()`` callable so any scope implementation can plug in.
"""

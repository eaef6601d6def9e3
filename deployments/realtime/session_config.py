"""What a session takes from the server's config: its defaults for new sessions, the limits
on what its client may send, and the sizes of its queues and pieces. ``IngressConfig``
extends it, so the config file keeps these under ``ingress``."""

from pydantic import BaseModel, ConfigDict, Field

from deployments.realtime.turn_taking.config import InterruptionRules
from handlers.denoise import NoiseReductionType
from handlers.instructions import VOICE_INSTRUCTIONS
from handlers.text import FIRST_CHUNK_MAX_WORDS, LOW_LEAD_MS
from handlers.vad import TurnDetection


class InputLimits(BaseModel):
    """What one client may send (``deployments.realtime.limits`` enforces it; ``docs/reliability.md``
    lists every limit)."""

    model_config = ConfigDict(extra="forbid")

    max_event_bytes: int = Field(1 << 20, ge=1024, lt=16 << 20)
    """Largest client event (a WebSocket message). Serve's proxy closes messages over 16 MiB
    with 1009 before the app sees them; this limit sits below that one, so it is ours and
    answered with an ``error``. 1 MiB of base64 is ~21 s of 24 kHz PCM16."""
    audio_rate: float = Field(2.0, gt=0)
    """Audio accepted per second of wall time, in seconds of audio, once the burst is spent."""
    audio_burst_s: float = Field(20.0, gt=0)
    """Audio a client may send at once (it then gets ``audio_rate``): a recorded question
    sent whole is accepted. Keep it below ``max_queued_audio_s``, or a burst alone could
    overflow the backlog while the VAD works through it."""
    events_per_s: float = Field(200.0, gt=0)
    """Client events of any type per second, once ``event_burst`` is spent (audio is usually
    sent as 20-100 ms chunks: 10-50 events per second)."""
    event_burst: int = Field(400, ge=1)
    max_queued_audio_s: float = Field(30.0, gt=0)
    """Audio waiting for the VAD; only a VAD that falls behind lets it grow."""
    strikes: int = Field(20, ge=1)
    """Refused events within ``strike_window_s`` that close the session (1008)."""
    strike_window_s: float = Field(10.0, gt=0)


class SessionConfig(BaseModel):
    """A session's part of ``ingress``: the defaults a client's ``session.update`` may
    change, and the server's bounds on the session."""

    model_config = ConfigDict(extra="forbid")

    instructions: str | None = VOICE_INSTRUCTIONS
    """The sessions' default system prompt, shown in ``session.created``; a client's own
    replace it. Written for speech (``handlers.instructions``); ``None`` keeps the model's
    own chat-template default."""
    turn_detection: TurnDetection = TurnDetection()
    noise_reduction: NoiseReductionType | None = None
    """A new session's ``audio.input.noise_reduction`` (``near_field``, ``far_field``, or
    ``None``: off, OpenAI's default); sessions may set their own. Phone callers cannot ask:
    this is how an operator denoises their calls."""
    interruption: InterruptionRules = InterruptionRules()
    """When speech during an answer interrupts it (sessions may set their own:
    ``turn_detection.interruption``)."""
    max_input_audio_s: float = Field(60.0, gt=0)
    """Longest utterance kept in ``input_audio_buffer`` (older audio is dropped)."""
    limits: InputLimits = InputLimits()
    """What one client may send: event size and rate, audio rate and backlog."""
    max_item_chars: int = Field(4000, ge=1)
    """Longest text of a ``conversation.item.create`` item and of ``instructions``."""
    stage_timeout_s: float = Field(15.0, gt=0)
    """Longest wait for a model stage's next result (a transcript, the LLM's next delta, the
    TTS's next chunk) before the response fails: a stage that hangs is a failure the client
    hears about within this time. Mind the LLM's first delta on a long prompt on CPU."""
    outgoing_events: int = Field(256, ge=8)
    """Per-session send queue: a slow client slows its own response, nobody else's."""
    first_chunk_words: int = Field(FIRST_CHUNK_MAX_WORDS, ge=1)
    """Words that start speaking when the reply has no clause break yet: fewer start
    sooner, at some cost in prosody."""
    answer_tokens: int | None = Field(24, ge=1)
    """Past this many tokens an answer whose client set no ``max_output_tokens`` ends with its
    sentence: voice answers stay short and end whole, below the LLM's cap
    (``llm.handler.max_tokens``). ``None``: answers run to that cap. Chosen on the quality
    benchmark (docs/bench/quality.md)."""
    low_lead_ms: float | None = Field(LOW_LEAD_MS, gt=0)
    """When the audio of an answer ready to play falls below this, its next piece goes out
    before its sentence ends (a clause, or the words so far), so a listener hears no
    silence inside an answer (docs/bench/quality.md); ``None``: later pieces are whole
    sentences, whatever the wait."""
    audio_delta_ms: int = Field(100, ge=10)
    """Size of each ``response.output_audio.delta``."""
    prefill_while_listening: bool = True
    """While the user speaks, have the LLM compute the conversation so far, so the answer's
    prompt finds it in vLLM's prefix cache (the replica that serves the answer may differ
    when the LLM has several: then it only costs that prefill)."""
    partial_transcript_interval_s: float | None = Field(1.0, gt=0)
    """While the user speaks, transcribe the utterance so far this often and send the words
    it adds as ``…input_audio_transcription.delta`` (``None``: one delta once transcribed).
    Never while the turn may be ending (a pause): then the STT works for the answer."""
    history_items: int = Field(40, ge=2)
    """Conversation items kept for the LLM prompt (oldest dropped first)."""

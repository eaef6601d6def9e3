"""The session's settings: what ``session.update`` may change and ``session.updated`` shows."""

from dataclasses import dataclass

from openai.types.realtime import (
    RealtimeAudioConfig,
    RealtimeAudioConfigInput,
    RealtimeAudioConfigOutput,
    RealtimeSessionCreateRequest,
)
from openai.types.realtime.realtime_audio_input_turn_detection import SemanticVad, ServerVad
from openai.types.realtime.session_update_event import Session
from pydantic import ValidationError

from deployments.realtime.protocol import AUDIO_FORMAT, ProtocolError, check_format
from handlers.vad import TurnDetection


@dataclass
class SessionSettings:
    model_name: str
    instructions: str | None
    defaults: TurnDetection
    """The server's turn detection, for fields a client leaves out."""
    turn_detection: TurnDetection | None
    """``None``: no VAD, the client commits the input buffer itself."""
    create_response: bool = True
    interrupt_response: bool = True

    def update(self, session: Session) -> bool:
        """Apply a ``session.update``; return whether turn detection changed (the input
        then restarts)."""
        if not isinstance(session, RealtimeSessionCreateRequest):
            raise ProtocolError("unsupported_value", "only realtime sessions are served", "session.type")
        if session.output_modalities not in (None, ["audio"]):
            raise ProtocolError("unsupported_value", "output_modalities must be ['audio']", "session.output_modalities")
        audio = session.audio
        if audio is not None and audio.output is not None:
            check_format(audio.output.format, "session.audio.output.format")
        turn_changed = False
        if audio is not None and audio.input is not None:
            check_format(audio.input.format, "session.audio.input.format")
            turn_changed = "turn_detection" in audio.input.model_fields_set
            if turn_changed:
                self._set_turn_detection(audio.input.turn_detection)
        if "instructions" in session.model_fields_set:
            self.instructions = session.instructions
        return turn_changed

    def _set_turn_detection(self, requested: ServerVad | SemanticVad | None) -> None:
        if requested is None:
            self.turn_detection = None
            return
        if requested.type != "server_vad":
            raise ProtocolError(
                "unsupported_value",
                f"turn_detection {requested.type!r} is not supported",
                "session.audio.input.turn_detection",
            )
        given = {
            name: value
            for name in ("threshold", "prefix_padding_ms", "silence_duration_ms")
            if (value := getattr(requested, name)) is not None
        }
        try:
            self.turn_detection = TurnDetection.model_validate(self.defaults.model_dump() | given)
        except ValidationError as exc:
            first = exc.errors()[0]
            param = f"session.audio.input.turn_detection.{first['loc'][0]}"
            raise ProtocolError("invalid_value", f"{first['msg']} at {param!r}", param) from None
        self.create_response = requested.create_response is not False
        self.interrupt_response = requested.interrupt_response is not False

    def describe(self) -> RealtimeSessionCreateRequest:
        turn = self.turn_detection
        return RealtimeSessionCreateRequest(
            type="realtime",
            model=self.model_name,
            instructions=self.instructions,
            output_modalities=["audio"],
            audio=RealtimeAudioConfig(
                input=RealtimeAudioConfigInput(
                    format=AUDIO_FORMAT,
                    turn_detection=None
                    if turn is None
                    else ServerVad(
                        type="server_vad",
                        threshold=turn.threshold,
                        prefix_padding_ms=turn.prefix_padding_ms,
                        silence_duration_ms=turn.silence_duration_ms,
                        create_response=self.create_response,
                        interrupt_response=self.interrupt_response,
                    ),
                ),
                output=RealtimeAudioConfigOutput(format=AUDIO_FORMAT),
            ),
        )

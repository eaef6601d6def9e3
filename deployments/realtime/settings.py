"""The session's settings: what ``session.update`` may change and ``session.updated`` shows."""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, get_args

from openai.types.realtime import (
    RealtimeAudioConfig,
    RealtimeAudioConfigInput,
    RealtimeAudioConfigOutput,
    RealtimeSessionCreateRequest,
)
from openai.types.realtime.realtime_audio_config_input import NoiseReduction
from openai.types.realtime.realtime_audio_input_turn_detection import SemanticVad, ServerVad
from openai.types.realtime.realtime_function_tool import RealtimeFunctionTool
from openai.types.realtime.realtime_response_create_params import RealtimeResponseCreateParams
from openai.types.realtime.realtime_tracing_config import TracingConfiguration
from openai.types.realtime.session_update_event import Session
from openai.types.responses.tool_choice_function import ToolChoiceFunction
from pydantic import BaseModel, ValidationError

from deployments.realtime.protocol import ProtocolError
from deployments.realtime.session_config import SessionConfig
from deployments.realtime.transports.wire_audio import PCM16, WireAudio, wire_audio
from deployments.realtime.turn_taking.config import SEMANTIC_PAUSE_MS, InterruptionRules
from handlers.denoise import NoiseReductionType
from handlers.tools import FunctionSpec, ToolUse
from handlers.vad import TurnDetection

N = TypeVar("N", int, float)
M = TypeVar("M", bound=BaseModel)

TRACING_METADATA_KEYS = 16
TRACING_KEY_CHARS = 64
TRACING_VALUE_CHARS = 512
"""Bounds on a session's ``tracing`` (OpenAI's for ``metadata`` elsewhere; it documents none
here): its names and each metadata entry become an attribute of the session's span, which a
client must not make as many or as long as it likes."""


@dataclass(frozen=True)
class ResponseOptions:
    """What one response is asked for: the session's settings, or a ``response.create``'s."""

    text_only: bool = False
    max_output_tokens: int | None = None
    instructions: str | None = None
    metadata: dict[str, str] | None = None
    in_conversation: bool = True  # False: `conversation: "none"`, an out-of-band answer
    tools: ToolUse | None = None
    """Functions the answer may call (``None``: none, or ``tool_choice: "none"``)."""
    output_audio: WireAudio = PCM16
    """The format its audio leaves in (the session's when it began)."""


@dataclass(kw_only=True)
class SessionSettings:
    model_name: str
    instructions: str | None
    defaults: TurnDetection
    """The server's turn detection, for fields a client leaves out."""
    turn_detection: TurnDetection | None
    """``None``: no VAD, the client commits the input buffer itself."""
    max_instructions_chars: int
    default_interruption: InterruptionRules = InterruptionRules()
    """The server's rules, for a turn detection that names none."""
    interruption: InterruptionRules = InterruptionRules()
    """When speech during an answer interrupts it (our extension field
    ``turn_detection.interruption``)."""
    create_response: bool = True
    interrupt_response: bool = True
    max_output_tokens: int | None = None
    """The client's cap on answer tokens (``None``: the model deployment's own)."""
    text_only: bool = False
    """``output_modalities: ["text"]``: answers are written, not spoken."""
    eagerness: str | None = None
    """Set while the client asked for ``semantic_vad`` (served by ``turn_end``)."""
    idle_timeout_ms: int | None = None
    """Server VAD: silence this long after an answer has played prompts a response."""
    tools: list[FunctionSpec] = field(default_factory=list)
    tool_choice: str | FunctionSpec = "auto"
    """``auto``, ``none``, ``required``, or the one function every answer must call."""
    input_audio: WireAudio = PCM16
    """The format of the client's audio (``input_audio_buffer.append``, audio items)."""
    noise_reduction: NoiseReductionType | None = None
    """``audio.input.noise_reduction.type``: the caller's audio is denoised before the VAD and
    STT hear it (``handlers.denoise``); ``None``: as sent."""
    output_audio: WireAudio = PCM16
    """The format the answer's audio leaves in."""
    tracing: Any = None  # how the session's trace is named (deployments.realtime.session_trace)

    @classmethod
    def for_new_session(cls, config: SessionConfig, model_name: str) -> "SessionSettings":
        """A new session's settings: the server's defaults."""
        return cls(
            model_name=model_name,
            instructions=config.instructions,
            defaults=config.turn_detection,
            turn_detection=config.turn_detection,
            max_instructions_chars=config.max_item_chars,
            default_interruption=config.interruption,
            interruption=config.interruption,
            noise_reduction=config.noise_reduction,
        )

    def update(self, session: Session) -> bool:
        """Apply a ``session.update``; return whether turn detection changed (the input
        then restarts). Values are checked against the bounds OpenAI documents for the
        Realtime API (``invalid_value`` with the parameter), then against what this server
        supports (``unsupported_value``); a refused update changes nothing."""
        if not isinstance(session, RealtimeSessionCreateRequest):
            raise ProtocolError("unsupported_value", "only realtime sessions are served", "session.type")
        check_modalities(session.output_modalities, "session.output_modalities")
        tools, tool_choice = self._tools_over_the_session(session.tools, session.tool_choice, "session")
        self._check_instructions(session.instructions, "session.instructions")
        check_tracing(session.tracing, "session.tracing")
        max_output_tokens = session.max_output_tokens
        if isinstance(max_output_tokens, int):
            check_range(max_output_tokens, 1, 4096, "session.max_output_tokens")
        audio = session.audio
        output_audio, input_audio = self.output_audio, self.input_audio
        if audio is not None and audio.output is not None:
            output_audio = wire_audio(audio.output.format, "session.audio.output.format", output_audio)
            if audio.output.speed is not None:  # accepted; served at 1.0, and shown so
                check_range(audio.output.speed, 0.25, 1.5, "session.audio.output.speed")
        turn_detection: TurnDetection | None = self.turn_detection
        interruption = self.interruption
        turn_changed = False
        noise_reduction = self.noise_reduction
        if audio is not None and audio.input is not None:
            input_audio = wire_audio(audio.input.format, "session.audio.input.format", input_audio)
            if "noise_reduction" in audio.input.model_fields_set:
                noise_reduction = checked_noise_reduction(
                    audio.input.noise_reduction, "session.audio.input.noise_reduction"
                )
            turn_changed = "turn_detection" in audio.input.model_fields_set
            if turn_changed:
                turn_detection = self._checked_turn_detection(audio.input.turn_detection)
                interruption = self._checked_interruption(audio.input.turn_detection)
        # Every check passed: apply the update whole.
        if turn_changed:
            self._apply_turn_detection(turn_detection, audio.input.turn_detection)  # type: ignore[union-attr]
            self.interruption = interruption
        if "max_output_tokens" in session.model_fields_set:
            self.max_output_tokens = max_output_tokens if isinstance(max_output_tokens, int) else None
        if "instructions" in session.model_fields_set:
            self.instructions = session.instructions
        if "tracing" in session.model_fields_set:
            self.tracing = session.tracing
        if session.output_modalities is not None:
            self.text_only = session.output_modalities == ["text"]
        self.tools, self.tool_choice = tools, tool_choice
        self.input_audio, self.output_audio = input_audio, output_audio
        self.noise_reduction = noise_reduction
        return turn_changed

    def response_options(self, asked: RealtimeResponseCreateParams | None) -> ResponseOptions:
        """One ``response.create``'s own settings over the session's, checked like an update."""
        if asked is None:
            return ResponseOptions(
                self.text_only,
                self.max_output_tokens,
                self.instructions,
                tools=tool_use(self.tools, self.tool_choice),
                output_audio=self.output_audio,
            )
        check_modalities(asked.output_modalities, "response.output_modalities")
        tools, tool_choice = self._tools_over_the_session(asked.tools, asked.tool_choice, "response")
        self._check_instructions(asked.instructions, "response.instructions")
        max_output_tokens = self.max_output_tokens
        if isinstance(asked.max_output_tokens, int):
            max_output_tokens = check_range(asked.max_output_tokens, 1, 4096, "response.max_output_tokens")
        elif asked.max_output_tokens == "inf":
            max_output_tokens = None
        if asked.conversation not in (None, "auto", "none"):
            raise ProtocolError("unsupported_value", "conversation must be 'auto' or 'none'", "response.conversation")
        return ResponseOptions(
            text_only=self.text_only if asked.output_modalities is None else asked.output_modalities == ["text"],
            max_output_tokens=max_output_tokens,
            instructions=asked.instructions if asked.instructions is not None else self.instructions,
            metadata=asked.metadata,
            in_conversation=asked.conversation != "none",
            tools=tool_use(tools, tool_choice),
            output_audio=self.output_audio,
        )

    def _tools_over_the_session(
        self, tools: Sequence[Any] | None, tool_choice: Any, prefix: str
    ) -> tuple[list[FunctionSpec], str | FunctionSpec]:
        """The tools and choice asked for, each the session's where not given, checked
        together (a named function must be among the tools that will be in force)."""
        specs = self.tools if tools is None else functions(tools, f"{prefix}.tools")
        choice = describe_tool_choice(self.tool_choice) if tool_choice is None else tool_choice
        return specs, checked_tool_choice(choice, specs, f"{prefix}.tool_choice")

    def _check_instructions(self, instructions: str | None, param: str) -> None:
        if instructions is not None and len(instructions) > self.max_instructions_chars:
            raise ProtocolError(
                "invalid_value",
                f"instructions are over this server's limit of {self.max_instructions_chars} characters",
                param,
            )

    def _checked_turn_detection(self, requested: ServerVad | SemanticVad | None) -> TurnDetection | None:
        if requested is None:
            return None
        param = "session.audio.input.turn_detection"
        if isinstance(requested, SemanticVad):  # the VAD pauses, the end-of-turn model decides
            return self.defaults.model_copy(update={"silence_duration_ms": SEMANTIC_PAUSE_MS})
        if requested.idle_timeout_ms is not None:
            check_range(requested.idle_timeout_ms, 5000, 30000, f"{param}.idle_timeout_ms")
        given = {
            name: value
            for name in ("threshold", "prefix_padding_ms", "silence_duration_ms")
            if (value := getattr(requested, name)) is not None
        }
        return validated(TurnDetection, self.defaults.model_dump() | given, param)

    def _checked_interruption(self, requested: ServerVad | SemanticVad | None) -> InterruptionRules:
        """The rules a turn detection asks for (over the server's), checked."""
        asked = (requested.model_extra or {}).get("interruption") if requested is not None else None
        if asked is None:
            return self.default_interruption
        param = "session.audio.input.turn_detection.interruption"
        if not isinstance(asked, dict):
            raise ProtocolError("invalid_value", "interruption must be an object", param)
        return validated(InterruptionRules, self.default_interruption.model_dump() | asked, param)

    def _apply_turn_detection(
        self, turn_detection: TurnDetection | None, requested: ServerVad | SemanticVad | None
    ) -> None:
        self.turn_detection = turn_detection
        self.eagerness = (requested.eagerness or "auto") if isinstance(requested, SemanticVad) else None
        self.idle_timeout_ms = requested.idle_timeout_ms if isinstance(requested, ServerVad) else None
        if requested is not None:
            self.create_response = requested.create_response is not False
            self.interrupt_response = requested.interrupt_response is not False

    def _describe_turn_detection(self) -> ServerVad | SemanticVad | None:
        turn = self.turn_detection
        if turn is None:
            return None
        reactions = {
            "create_response": self.create_response,
            "interrupt_response": self.interrupt_response,
            "interruption": self.interruption.model_dump(),
        }
        if self.eagerness is not None:
            return SemanticVad(type="semantic_vad", eagerness=self.eagerness, **reactions)
        return ServerVad(
            type="server_vad",
            threshold=turn.threshold,
            prefix_padding_ms=turn.prefix_padding_ms,
            silence_duration_ms=turn.silence_duration_ms,
            idle_timeout_ms=self.idle_timeout_ms,
            **reactions,
        )

    def describe(self) -> RealtimeSessionCreateRequest:
        return RealtimeSessionCreateRequest(
            type="realtime",
            model=self.model_name,
            instructions=self.instructions,
            max_output_tokens=self.max_output_tokens if self.max_output_tokens is not None else "inf",
            output_modalities=["text"] if self.text_only else ["audio"],
            tools=[RealtimeFunctionTool(type="function", **function.model_dump()) for function in self.tools],
            tool_choice=describe_tool_choice(self.tool_choice),
            tracing=self.tracing,
            audio=RealtimeAudioConfig(
                input=RealtimeAudioConfigInput(
                    format=self.input_audio.describe(),
                    turn_detection=self._describe_turn_detection(),
                    noise_reduction=NoiseReduction(type=self.noise_reduction) if self.noise_reduction else None,
                ),
                output=RealtimeAudioConfigOutput(format=self.output_audio.describe(), speed=1.0),
            ),
        )


def validated(model: type[M], data: dict[str, Any], param: str) -> M:
    """``data`` as a ``model``; ``invalid_value`` naming the first field at fault."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join([param, *map(str, first["loc"][:1])])
        raise ProtocolError("invalid_value", f"{first['msg']} at {field!r}", field) from None


def check_range(value: N, low: float, high: float, param: str) -> N:
    """``value``; ``invalid_value`` unless ``low <= value <= high`` (NaN is never in range)."""
    if not low <= value <= high:
        raise ProtocolError("invalid_value", f"{param.rsplit('.', 1)[-1]} must be from {low:g} to {high:g}", param)
    return value


def check_tracing(tracing: Any, param: str) -> None:
    """Refuse a ``tracing`` over its bounds (``invalid_value`` naming the field): a workflow
    name or group id over ``TRACING_VALUE_CHARS``, metadata with over ``TRACING_METADATA_KEYS``
    entries, a key over ``TRACING_KEY_CHARS`` or a value (as the span has it: a string, else
    its JSON) over ``TRACING_VALUE_CHARS``."""
    if not isinstance(tracing, TracingConfiguration):
        return
    for name in ("workflow_name", "group_id"):
        if len(getattr(tracing, name) or "") > TRACING_VALUE_CHARS:
            raise ProtocolError(
                "invalid_value",
                f"{name} is over this server's limit of {TRACING_VALUE_CHARS} characters",
                f"{param}.{name}",
            )
    metadata = tracing.metadata
    if not isinstance(metadata, dict):  # not put on the span (session_trace)
        return
    param = f"{param}.metadata"
    if len(metadata) > TRACING_METADATA_KEYS:
        raise ProtocolError("invalid_value", f"metadata has over {TRACING_METADATA_KEYS} keys", param)
    for key, value in metadata.items():
        if len(key) > TRACING_KEY_CHARS:
            raise ProtocolError("invalid_value", f"a metadata key is over {TRACING_KEY_CHARS} characters", param)
        if len(value if isinstance(value, str) else json.dumps(value)) > TRACING_VALUE_CHARS:
            raise ProtocolError(
                "invalid_value", f"metadata value of {key!r} is over {TRACING_VALUE_CHARS} characters", param
            )


def checked_noise_reduction(requested: NoiseReduction | None, param: str) -> NoiseReductionType | None:
    """The denoiser a session asks for (``null``: none); OpenAI requires the object's ``type``."""
    if requested is None:
        return None
    if requested.type not in get_args(NoiseReductionType):
        raise ProtocolError(
            "invalid_value", "noise_reduction.type must be 'near_field' or 'far_field'", f"{param}.type"
        )
    return requested.type


def check_modalities(modalities: Sequence[str] | None, param: str) -> None:
    if modalities not in (None, ["audio"], ["text"]):
        raise ProtocolError("invalid_value", "output_modalities must be ['audio'] or ['text']", param)


def functions(tools: Sequence[Any], param: str) -> list[FunctionSpec]:
    """The function tools a client gave; other kinds (MCP servers) are not served."""
    specs = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, RealtimeFunctionTool):
            raise ProtocolError("unsupported_value", "only function tools are supported", f"{param}[{index}].type")
        specs.append(validated(FunctionSpec, tool.model_dump(exclude={"type"}, exclude_none=True), f"{param}[{index}]"))
    if len({spec.name for spec in specs}) < len(specs):
        raise ProtocolError("invalid_value", "two tools have the same name", param)
    return specs


def checked_tool_choice(choice: Any, tools: list[FunctionSpec], param: str) -> str | FunctionSpec:
    """``auto``/``none``/``required``, or the function named, which must be among ``tools``."""
    if isinstance(choice, str):
        return choice
    if not isinstance(choice, ToolChoiceFunction):
        raise ProtocolError("unsupported_value", "tool_choice may name a function, not an MCP tool", param)
    named = next((tool for tool in tools if tool.name == choice.name), None)
    if named is None:
        raise ProtocolError("invalid_value", f"tool_choice names {choice.name[:64]!r}, which is not in tools", param)
    return named


def tool_use(tools: list[FunctionSpec], choice: str | FunctionSpec) -> ToolUse | None:
    """What the LLM is told of the tools (``None``: it may call none)."""
    if not tools or choice == "none":
        return None
    return ToolUse(functions=tools, choice=choice)


def describe_tool_choice(choice: str | FunctionSpec) -> Any:
    """The choice as the protocol has it (a function is named: new tools may redefine it)."""
    return ToolChoiceFunction(type="function", name=choice.name) if isinstance(choice, FunctionSpec) else choice

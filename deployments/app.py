"""Application builder: ``serve run deployments.app:build_app`` or ``import_path`` in a Serve
config file / KubeRay ``serveConfigV2``, with the :class:`AppConfig` as ``args``."""

from pathlib import PurePath
from typing import Any

from ray.serve import Application, Deployment

from deployments.config import AppConfig, DeploymentOptions
from deployments.ingress import RealtimeIngress
from deployments.models import LLM, STT, TTS, VAD, TurnEnd


def build_app(args: dict[str, Any] | None = None) -> Application:
    config = AppConfig.model_validate(args or {})
    synthetic = config.synthetic
    vad_deployment = (
        _configured(VAD, config.vad.deployment).bind(synthetic, config.vad.noise_reduction)
        if config.vad.placement == "deployment"
        else None
    )
    return _configured(RealtimeIngress, config.ingress.deployment).bind(
        vad_deployment,
        _configured(TurnEnd, config.turn_end.deployment).bind(config.turn_end.handler) if synthetic is None else None,
        _configured(STT, config.stt.deployment).bind(config.stt.handler, synthetic),
        _configured(LLM, config.llm.deployment).bind(config.llm.handler, synthetic, config.llm.delta_interval_s),
        _configured(TTS, config.tts.deployment).bind(config.tts.handler, synthetic),
        config.ingress,
        _model_name(config),
        config.vad,
        None if synthetic is not None else config.llm.handler.max_model_len - config.llm.handler.max_tokens,
        synthetic,
        models_used=models_used(config),
    )


def _configured(deployment: Any, options: DeploymentOptions) -> Deployment:
    """``deployment`` (a ``@serve.deployment`` class, which type checkers see as the class)
    with the profile's options."""
    return deployment.options(**options.serve_options())  # type: ignore[no-any-return]


def _model_name(config: AppConfig) -> str:
    """What ``session.created`` names: the LLM, or ``synthetic`` (load tests tell the mode by it)."""
    if config.synthetic is not None:
        return "synthetic"
    return PurePath(config.llm.handler.model).name if config.llm.handler.model else "SmolLM2-135M-Instruct"


def models_used(config: AppConfig) -> dict[str, str]:
    """Each stage's model as a recorded session's report names it: the configured name, or
    the bundled model's."""
    if config.synthetic is not None:
        return dict.fromkeys(("vad", "stt", "llm", "tts"), "synthetic")
    return {
        "vad": "silero-vad",
        "turn_end": config.turn_end.handler.model or "smart-turn-v3.2-cpu",
        "stt": config.stt.handler.model or "tiny.en",
        "llm": _model_name(config),
        "tts": config.tts.handler.voice or "en_US-joe-medium",
    }

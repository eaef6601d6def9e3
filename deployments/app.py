"""Application builder: ``serve run deployments.app:build_app`` or ``import_path`` in a Serve
config file / KubeRay ``serveConfigV2``, with the :class:`AppConfig` as ``args``."""

from pathlib import PurePath
from typing import Any

from ray.serve import Application

from deployments.config import AppConfig
from deployments.ingress import RealtimeIngress
from deployments.models import LLM, STT, TTS, VAD


def build_app(args: dict[str, Any] | None = None) -> Application:
    config = AppConfig.model_validate(args or {})
    synthetic = config.synthetic
    return RealtimeIngress.options(**config.ingress.deployment.serve_options()).bind(
        VAD.options(**config.vad.deployment.serve_options()).bind(synthetic),
        STT.options(**config.stt.deployment.serve_options()).bind(config.stt.handler, synthetic),
        LLM.options(**config.llm.deployment.serve_options()).bind(config.llm.handler, synthetic),
        TTS.options(**config.tts.deployment.serve_options()).bind(config.tts.handler, synthetic),
        config.ingress,
        _model_name(config),
    )


def _model_name(config: AppConfig) -> str:
    """What ``session.created`` names: the LLM, or ``synthetic`` (load tests tell the mode by it)."""
    if config.synthetic is not None:
        return "synthetic"
    return PurePath(config.llm.handler.model).name if config.llm.handler.model else "SmolLM2-135M-Instruct"

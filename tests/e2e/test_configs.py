"""The shipped Serve configs are valid for Serve itself and for our application."""

from pathlib import Path

import pytest
import yaml
from ray.serve.schema import ServeDeploySchema

from deployments.app import build_app
from deployments.config import AppConfig

pytestmark = [
    pytest.mark.fast,
    # cluster/loadtest.yaml's TTS autoscaling pushes metrics every second (metrics_interval_s):
    # Ray deprecates the field for environment variables, and still honours it.
    pytest.mark.filterwarnings("ignore:The `metrics_interval_s` field:DeprecationWarning"),
]
"""No Ray cluster and no model: part of ``make test-fast``."""

CLUSTER = Path(__file__).parents[2] / "cluster"


@pytest.mark.parametrize("name", ["local.yaml", "gpu.yaml", "loadtest.yaml"])
def test_config_is_valid_for_serve_and_the_app(name: str) -> None:
    schema = ServeDeploySchema.model_validate(yaml.safe_load((CLUSTER / name).read_text()))
    (app,) = schema.applications
    assert app.import_path == "deployments.app:build_app"
    AppConfig.model_validate(app.args)
    build_app(app.args)


def test_gpu_profile_gives_models_their_own_gpu_and_autoscales_tts() -> None:
    args = yaml.safe_load((CLUSTER / "gpu.yaml").read_text())["applications"][0]["args"]
    config = AppConfig.model_validate(args)
    assert [config.stt.deployment.num_gpus, config.llm.deployment.num_gpus, config.tts.deployment.num_gpus] == [1, 1, 1]
    tts = config.tts.deployment.serve_options()
    assert tts["autoscaling_config"]["max_replicas"] > tts["autoscaling_config"]["min_replicas"]
    assert "num_replicas" not in tts


def test_local_profile_fits_two_cpus() -> None:
    args = yaml.safe_load((CLUSTER / "local.yaml").read_text())["applications"][0]["args"]
    config = AppConfig.model_validate(args)
    stages = [config.ingress, config.vad, config.stt, config.llm, config.tts]
    assert sum(stage.deployment.num_cpus for stage in stages) <= 2
    assert all(stage.deployment.num_gpus == 0 for stage in stages)


def test_session_cap_must_leave_room_for_refusals() -> None:
    with pytest.raises(ValueError, match="must exceed"):
        AppConfig.model_validate({"ingress": {"max_sessions": 10, "deployment": {"max_ongoing_requests": 10}}})

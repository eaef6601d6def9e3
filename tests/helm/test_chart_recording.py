"""The chart's recording values: a volume on the pods that run the ingress, the app's
``ingress.recording`` set from them, and refusals of what would lose recordings."""

from typing import Any

import helm_python as helm
import jsonschema
import pytest
import yaml
from test_chart import CRD_SCHEMA, rayservice, render

from deployments.config import AppConfig

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""


def pods(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each pod template's spec, by group (``head`` for the head)."""
    cluster = service["spec"]["rayClusterConfig"]
    specs = {"head": cluster["headGroupSpec"]["template"]["spec"]}
    return specs | {group["groupName"]: group["template"]["spec"] for group in cluster["workerGroupSpecs"]}


def recording_volume(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The pod's recordings volume and its container's mount of it, if any."""
    (container,) = spec["containers"]
    volumes = [volume for volume in spec.get("volumes", []) if volume["name"] == "recordings"]
    mounts = [mount for mount in container.get("volumeMounts", []) if mount["name"] == "recordings"]
    assert len(volumes) == len(mounts) <= 1
    return (volumes[0], mounts[0]) if volumes else None


def test_recording_mounts_a_volume_where_the_ingress_runs_and_configures_the_app() -> None:
    service = rayservice({"recording": {"enabled": True, "retentionDays": 7}})
    jsonschema.validate(service, CRD_SCHEMA)
    (app,) = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    recording = AppConfig.model_validate(app["args"]).ingress.recording
    assert recording.directory == "/var/lib/s2s-serve/recordings" and recording.mode == "on_request"
    assert (recording.max_session_s, recording.max_total_bytes, recording.retention_days) == (3600, 10 << 30, 7)

    specs = pods(service)
    assert recording_volume(specs["head"]) is None and recording_volume(specs["gpu"]) is None, "no ingress there"
    volume, mount = recording_volume(specs["cpu"]) or ({}, {})
    assert volume == {"name": "recordings", "emptyDir": {"sizeLimit": "20Gi"}}
    assert mount == {"name": "recordings", "mountPath": "/var/lib/s2s-serve/recordings"}


def test_a_claim_keeps_recordings_and_an_ingress_without_a_selector_gets_the_volume_on_every_worker() -> None:
    values = {
        "recording": {"enabled": True, "existingClaim": "calls", "mode": "always", "maxTotalBytes": None},
        "serve": {"app": {"args": {"ingress": {"deployment": {"label_selector": None}}}}},
    }
    service = rayservice(values)
    jsonschema.validate(service, CRD_SCHEMA)
    (app,) = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    recording = AppConfig.model_validate(app["args"]).ingress.recording
    assert recording.mode == "always" and recording.max_total_bytes is None
    specs = pods(service)
    for group in ("cpu", "gpu"):
        volume, _ = recording_volume(specs[group]) or ({}, {})
        assert volume == {"name": "recordings", "persistentVolumeClaim": {"claimName": "calls"}}


def test_recording_is_off_by_default_and_set_by_hand_fails_the_render() -> None:
    service = rayservice()
    assert all(recording_volume(spec) is None for spec in pods(service).values())
    with pytest.raises(helm.HelmError, match="set the chart's recording values instead"):
        render({"serve": {"app": {"args": {"ingress": {"recording": {"directory": "/tmp/calls"}}}}}})
    with pytest.raises(helm.HelmError, match="at '/recording/mode"):
        render({"recording": {"enabled": True, "mode": "sometimes"}})

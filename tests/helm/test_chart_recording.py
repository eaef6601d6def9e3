"""The chart's recording values: a volume on the pods that run the ingress, the app's
``ingress.recording`` set from them, a byte budget that keeps an emptyDir under its
sizeLimit, and refusals of what would lose recordings."""

from typing import Any

import helm_python as helm
import jsonschema
import pytest
import yaml
from test_chart import CRD_SCHEMA, rayservice, render

from deployments.config import AppConfig
from deployments.realtime.recording.config import RecordingConfig

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
    assert (recording.max_session_s, recording.max_total_bytes, recording.retention_days) == (3600, 18 << 30, 7)

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


def served_recording(recording: dict[str, Any]) -> RecordingConfig:
    (app,) = yaml.safe_load(rayservice({"recording": {"enabled": True} | recording})["spec"]["serveConfigV2"])[
        "applications"
    ]
    return AppConfig.model_validate(app["args"]).ingress.recording


QUANTITIES = {"20Gi": 20 << 30, "1.5Gi": 3 << 29, "4000M": 4 * 10**9, "2T": 2 * 10**12, "3221225472": 3 << 30}


@pytest.mark.parametrize("size_limit", list(QUANTITIES))
def test_on_the_emptydir_the_recordings_budget_stays_a_tenth_under_its_size_limit(size_limit: str) -> None:
    """The kubelet evicts a pod whose emptyDir passes its sizeLimit, the ingress's calls with
    it: without maxTotalBytes the app gets 90 % of the sizeLimit as its budget."""
    most = QUANTITIES[size_limit] * 9 // 10
    assert served_recording({"sizeLimit": size_limit}).max_total_bytes == most
    smaller = served_recording({"sizeLimit": size_limit, "maxTotalBytes": most - (1 << 20)})
    assert smaller.max_total_bytes == most - (1 << 20), "a smaller budget is kept"
    assert served_recording({"sizeLimit": size_limit, "maxTotalBytes": most}).max_total_bytes == most
    with pytest.raises(helm.HelmError, match=r"must leave 10 % of the emptyDir's sizeLimit"):
        render({"recording": {"enabled": True, "sizeLimit": size_limit, "maxTotalBytes": most + 1}})


@pytest.mark.parametrize(
    ("size_limit", "max_session_s"), [("300Mi", 3600), ("700Mi", 3600), ("800Mi", 3600), ("300Mi", 600)]
)
def test_the_render_refuses_a_budget_exactly_when_the_app_would(size_limit: str, max_session_s: int) -> None:
    """A budget too small for one recording fails the render, as the app would fail to start."""
    budget = (int(size_limit.removesuffix("Mi")) << 20) * 9 // 10
    try:
        RecordingConfig(directory="/r", max_session_s=max_session_s, max_total_bytes=budget)
        app_accepts = True
    except ValueError:
        app_accepts = False
    recording = {"sizeLimit": size_limit, "maxSessionS": max_session_s}
    if app_accepts:
        assert served_recording(recording).max_total_bytes == budget
    else:
        with pytest.raises(helm.HelmError, match="must hold one recording of maxSessionS"):
            render({"recording": {"enabled": True} | recording})


def test_a_claim_keeps_the_budget_given_and_a_size_limit_must_be_a_quantity() -> None:
    claim = served_recording({"existingClaim": "calls", "maxTotalBytes": 100 << 30})
    assert claim.max_total_bytes == 100 << 30, "a claim's size is the operator's to know"
    with pytest.raises(helm.HelmError, match="at '/recording/sizeLimit'"):
        render({"recording": {"enabled": True, "sizeLimit": "20 GiB"}})


def test_recording_is_off_by_default_and_set_by_hand_fails_the_render() -> None:
    service = rayservice()
    assert all(recording_volume(spec) is None for spec in pods(service).values())
    with pytest.raises(helm.HelmError, match="set the chart's recording values instead"):
        render({"serve": {"app": {"args": {"ingress": {"recording": {"directory": "/tmp/calls"}}}}}})
    with pytest.raises(helm.HelmError, match="at '/recording/mode"):
        render({"recording": {"enabled": True, "mode": "sometimes"}})

"""The Helm chart rendered by the real Helm engine (helm-python-sdk, no binary), each
RayService validated against KubeRay v1.7.0's CRD with unknown fields rejected, its Serve
config against Serve's own schema and our app builder, and kept equal to cluster/gpu.yaml."""

import copy
import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import helm_python as helm
import jsonschema
import pytest
import yaml
from ray.serve._private.constants import RAY_SERVE_DIRECT_INGRESS_SHUTDOWN_BUFFER_S
from ray.serve.schema import ServeDeploySchema

from deployments.config import AppConfig
from deployments.serve_local import ingress_drain_hold_s

ROOT = Path(__file__).parents[2]
CHART = ROOT / "helm" / "s2s-serve"
CRD = ROOT / "helm" / "crds" / "ray.io_rayservices.yaml"
sys.path.insert(0, str(ROOT / "helm"))
from values_schema import SCHEMA, values_schema  # noqa: E402

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""

CPU_GROUP = {
    "name": "cpu",
    "replicas": 1,
    "minReplicas": 1,
    "maxReplicas": 2,
    "gpus": 0,
    "resources": {},
    "labels": {"s2s-serve/pool": "cpu"},
}
GPU_HEAVY = {
    "serve": {
        "app": {
            "args": {
                "stt": {"deployment": {"num_gpus": 1, "num_replicas": 2}},
                "llm": {"deployment": {"num_gpus": 2}},
                "tts": {"deployment": {"num_gpus": 0.5}},
            }
        }
    },
    "workerGroups": [
        CPU_GROUP,
        {"name": "h100", "replicas": 1, "minReplicas": 1, "maxReplicas": 2, "gpus": 8, "resources": {}},
        {"name": "l4", "replicas": 0, "minReplicas": 0, "maxReplicas": 8, "gpus": 1, "resources": {}},
    ],
    "hubToken": {"secretName": "hf", "key": "token"},
    "ingress": {"enabled": True},
    "serviceMonitor": {"enabled": True},
}
MANY_TTS = {
    "serve": {
        "app": {"args": {"tts": {"deployment": {"autoscaling_config": {"min_replicas": 4, "max_replicas": 32}}}}}
    },
    "workerGroups": [
        CPU_GROUP,
        {"name": "gpu", "replicas": 4, "minReplicas": 2, "maxReplicas": 20, "gpus": 2, "resources": {}},
    ],
}


def render(values: dict[str, Any] | None = None) -> dict[str, Any]:
    manifests = helm.Chart.load(CHART).render(values, name="voice", namespace="agents")
    return {path: yaml.safe_load(text) for path, text in manifests.items() if path.endswith(".yaml") and text.strip()}


def values_of(values: dict[str, Any] | None) -> dict[str, Any]:
    """The app's args that the chart serves with ``values``."""
    (app,) = yaml.safe_load(rayservice(values)["spec"]["serveConfigV2"])["applications"]
    return cast(dict[str, Any], app["args"])


def rayservice(values: dict[str, Any] | None = None) -> dict[str, Any]:
    return render(values)["s2s-serve/templates/rayservice.yaml"]


def closed(schema: Any) -> Any:
    """The CRD schema with unknown fields rejected, as the API server's structural pruning
    would silently drop them (x-kubernetes-preserve-unknown-fields stays open)."""
    if isinstance(schema, dict):
        schema = {key: closed(value) for key, value in schema.items()}
        if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            schema.setdefault("additionalProperties", False)
        return schema
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    return schema


CRD_SCHEMA = closed(
    next(v for v in yaml.safe_load(CRD.read_text())["spec"]["versions"] if v["name"] == "v1")["schema"][
        "openAPIV3Schema"
    ]
)


@pytest.mark.parametrize("values", [None, GPU_HEAVY, MANY_TTS], ids=["default", "gpu-heavy", "many-tts"])
def test_rendered_rayservice_is_valid_for_kuberay_serve_and_the_app(values: dict[str, Any] | None) -> None:
    service = rayservice(values)
    jsonschema.validate(service, CRD_SCHEMA)
    serve_config = ServeDeploySchema.model_validate(yaml.safe_load(service["spec"]["serveConfigV2"]))
    (app,) = serve_config.applications
    module, _, builder = app.import_path.partition(":")
    built = getattr(importlib.import_module(module), builder)(app.args)
    assert deployment_names(built) == {"RealtimeIngress", "VAD", "TurnEnd", "STT", "LLM", "TTS"}
    AppConfig.model_validate(app.args)


def deployment_names(app: Any) -> set[str]:
    """The deployments an application binds, its own and those bound into its arguments."""
    bound = app._bound_deployment  # noqa: SLF001 (Serve has no public walk of a built app)
    names = {bound.name}
    for arg in bound.init_args:
        if hasattr(arg, "_bound_deployment"):
            names |= deployment_names(arg)
    return names


def test_default_values_serve_exactly_cluster_gpu_yaml() -> None:
    """One source of truth: the chart's Serve config and cluster/gpu.yaml must not drift."""
    rendered = yaml.safe_load(rayservice()["spec"]["serveConfigV2"])
    assert rendered == yaml.safe_load((ROOT / "cluster" / "gpu.yaml").read_text())


def test_values_schema_is_generated_from_the_app_config() -> None:
    assert json.loads(SCHEMA.read_text()) == values_schema(), "run: make chart-schema"


def test_gpus_and_labels_match_between_pods_and_ray_and_fit_the_models() -> None:
    spec = rayservice()["spec"]["rayClusterConfig"]
    assert spec["enableInTreeAutoscaling"] is True
    assert spec["headGroupSpec"]["rayStartParams"] == {"num-cpus": "0", "num-gpus": "0", "dashboard-host": "0.0.0.0"}
    most_gpus = 0
    for group in spec["workerGroupSpecs"]:
        (container,) = group["template"]["spec"]["containers"]
        gpus = int(group["rayStartParams"]["num-gpus"])
        assert container["resources"]["requests"].get("nvidia.com/gpu", 0) == gpus
        assert container["resources"]["limits"].get("nvidia.com/gpu", 0) == gpus
        if gpus:
            assert group["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
        most_gpus += gpus * group["maxReplicas"]
    args = AppConfig.model_validate(yaml.safe_load(rayservice()["spec"]["serveConfigV2"])["applications"][0]["args"])
    for stage in (args.ingress, args.vad, args.stt, args.llm, args.tts):  # every selector finds its pods
        selector = stage.deployment.label_selector or {}
        assert any(selector.items() <= group.get("labels", {}).items() for group in spec["workerGroupSpecs"])
    at_most = sum(
        stage.deployment.num_gpus * (stage.deployment.autoscaling_config or {}).get("max_replicas", 1)
        for stage in (args.stt, args.llm, args.tts)
    )
    assert at_most <= most_gpus


def test_optional_parts_and_the_hub_token() -> None:
    manifests = render(GPU_HEAVY)
    ingress = manifests["s2s-serve/templates/ingress.yaml"]
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == "voice-serve-svc"
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "3600"
    assert manifests["s2s-serve/templates/podmonitor.yaml"]["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    head = manifests["s2s-serve/templates/rayservice.yaml"]["spec"]["rayClusterConfig"]["headGroupSpec"]
    env = head["template"]["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert "HF_TOKEN" not in container_env(rayservice())["head"]
    defaults = {"s2s-serve/templates/rayservice.yaml", "s2s-serve/templates/session-secret.yaml"}
    assert set(render()) == defaults  # both off by default


def pod_labels(service: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Each pod's labels as KubeRay sets them: the template's, ``ray.io/node-type`` and the
    group's Ray labels (KubeRay keeps the template's, all but its own ``ray.io/*`` keys)."""
    cluster = service["spec"]["rayClusterConfig"]
    labels = {"head": cluster["headGroupSpec"]["template"]["metadata"]["labels"] | {"ray.io/node-type": "head"}}
    for group in cluster["workerGroupSpecs"]:
        template = group["template"]["metadata"]["labels"]
        labels[group["groupName"]] = template | group.get("labels", {}) | {"ray.io/node-type": "worker"}
    return labels


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (``matchLabels`` and ``In``/``NotIn``/``Exists`` expressions)."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        ok = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not ok:
            return False
    return True


@pytest.mark.parametrize("values", [GPU_HEAVY, {"serviceMonitor": {"enabled": True}}], ids=["gpu-heavy", "default"])
def test_metrics_are_scraped_on_the_worker_pods_where_the_ingress_runs(values: dict[str, Any]) -> None:
    """The app's ray_s2s_* metrics come from the ingress, on the CPU workers: the monitor must
    select every pod of the release, head and workers, on a declared ``metrics`` port."""
    manifests = render(values)
    monitor = manifests["s2s-serve/templates/podmonitor.yaml"]
    assert monitor["kind"] == "PodMonitor"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["interval"] == "15s"
    service = manifests["s2s-serve/templates/rayservice.yaml"]
    cluster = service["spec"]["rayClusterConfig"]
    labels = pod_labels(service)
    assert len(labels) >= 3  # the head and at least two worker groups
    for name, pod_label in labels.items():
        assert selects(monitor["spec"]["selector"], pod_label), f"{name} pods are not scraped"
    for pod in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        (container,) = pod["template"]["spec"]["containers"]
        assert {"containerPort": 8080, "name": "metrics"} in container["ports"]
    ingress_selector = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"][0]["args"]["ingress"][
        "deployment"
    ]["label_selector"]
    ingress_groups = [g for g in cluster["workerGroupSpecs"] if ingress_selector.items() <= g.get("labels", {}).items()]
    assert ingress_groups and all(selects(monitor["spec"]["selector"], labels[g["groupName"]]) for g in ingress_groups)
    other_release = labels["head"] | {"app.kubernetes.io/instance": "another"}
    assert not selects(monitor["spec"]["selector"], other_release)


def container_env(service: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The plain ``env`` values of the head's container and of each worker group's, by group."""
    cluster = service["spec"]["rayClusterConfig"]
    pods = {"head": cluster["headGroupSpec"]} | {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    envs = {}
    for name, pod in pods.items():
        (container,) = pod["template"]["spec"]["containers"]
        envs[name] = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    return envs


@pytest.mark.parametrize("values", [None, GPU_HEAVY, MANY_TTS], ids=["default", "gpu-heavy", "many-tts"])
def test_haproxy_settings_reach_the_head_and_every_worker_group_before_ray_starts(
    values: dict[str, Any] | None,
) -> None:
    """Ray reads them in every process (the controller, each node's HAProxy manager, every
    replica): in each pod's container env, `ray start` and all it starts inherit them."""
    service = rayservice(values)
    envs = container_env(service)
    groups = [g["groupName"] for g in service["spec"]["rayClusterConfig"]["workerGroupSpecs"]]
    assert set(envs) == {"head", *groups} and len(groups) >= 2
    for env in envs.values():
        assert env["RAY_SERVE_ENABLE_HA_PROXY"] == "1"
        assert env["RAY_SERVE_THROUGHPUT_OPTIMIZED"] == "1"
        assert env["RAY_SERVE_HAPROXY_NBTHREAD"] == "4"
        assert env["RAY_SERVE_HAPROXY_HARD_STOP_AFTER_S"] == "3600"


def test_the_data_path_switches_every_pod_and_extra_settings_reach_every_pod() -> None:
    extra = {"haproxy": {"threads": 2, "env": {"RAY_SERVE_HAPROXY_MAXCONN": "8192"}}}
    for env in container_env(rayservice({**GPU_HEAVY, **extra})).values():
        assert env["RAY_SERVE_HAPROXY_NBTHREAD"] == "2"
        assert env["RAY_SERVE_HAPROXY_MAXCONN"] == "8192"
    for env in container_env(rayservice({"dataPath": "proxy", **extra})).values():
        assert env == {"RAY_SERVE_ENABLE_HA_PROXY": "0"}  # no HAProxy setting without HAProxy


def test_behind_haproxy_the_ingress_keeps_a_fixed_replica_count() -> None:
    """A change of the ingress replica set reloads HAProxy, and the old process cuts the
    sessions it carries after hard-stop-after; a replica scaled away cuts its own."""
    args = yaml.safe_load(rayservice()["spec"]["serveConfigV2"])["applications"][0]["args"]
    assert "autoscaling_config" not in args["ingress"]["deployment"]
    assert args["ingress"]["deployment"]["num_replicas"] >= 2


def test_every_wait_of_a_stopping_pod_or_cluster_is_set_from_the_ingress_drain() -> None:
    """The ingress's drain_s and graceful_shutdown_timeout_s set the rest: an upgrade's old
    cluster lives drain_s, each worker pod's preStop hook drains its Ray node for up to the
    grace period + 10 s and Kubernetes waits 30 s more before SIGKILL; a HAProxy hard stop
    that would cut calls being drained fails the render."""
    ingress = {"drain_s": 120, "deployment": {"graceful_shutdown_timeout_s": 150}}
    drain = {"serve": {"app": {"args": {"ingress": ingress}}}}
    for values, drain_s, grace_s in ((None, 300, 330), (drain, 120, 150)):
        spec = rayservice(values)["spec"]
        assert spec["upgradeStrategy"] == {"type": "NewCluster"}
        assert spec["rayClusterDeletionDelaySeconds"] == drain_s
        for group in spec["rayClusterConfig"]["workerGroupSpecs"]:
            pod = group["template"]["spec"]
            assert pod["terminationGracePeriodSeconds"] == grace_s + 40
            (container,) = pod["containers"]
            hook = container["lifecycle"]["preStop"]["exec"]["command"]
            assert hook == ["python", "-m", "cluster.prestop", "--deadline-s", str(grace_s + 10)]
        # Behind HAProxy a stopped ingress replica's HTTP server outlives the drain (Ray's
        # default of 30 s cut the 300 s drain), and Ray need not raise the grace period for it.
        hold = ingress_drain_hold_s(AppConfig.model_validate(values_of(values)).ingress)
        for env in pod_env(rayservice(values)):
            assert {"name": "RAY_SERVE_DIRECT_INGRESS_MIN_DRAINING_PERIOD_S", "value": f"{hold:g}"} in env
        assert hold + RAY_SERVE_DIRECT_INGRESS_SHUTDOWN_BUFFER_S <= grace_s
    with pytest.raises(helm.HelmError, match=r"hardStopAfterS \(300\) must be at least .* \(340\)"):
        render({"haproxy": {"hardStopAfterS": 300}})
    render({"haproxy": {"hardStopAfterS": 300}, "dataPath": "proxy"})  # no HAProxy: no hard stop


def test_the_prestop_hook_is_in_the_image_and_refuses_a_bad_deadline() -> None:
    """The hook runs ``python -m cluster.prestop`` in the app's image: the package ships
    ``cluster`` (pyproject), and a bad argument is a usage error, not a traceback."""
    run = subprocess.run(
        [sys.executable, "-m", "cluster.prestop", "--deadline-s", "0"], capture_output=True, text=True, cwd=ROOT
    )
    assert run.returncode == 2 and "--deadline-s must be positive" in run.stderr
    assert "cluster*" in (ROOT / "pyproject.toml").read_text()


def test_chart_lints_clean() -> None:
    report = helm.lint(CHART, strict=True)
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


def test_a_label_selector_no_worker_group_satisfies_fails_the_render() -> None:
    """Replacing the worker groups without the CPU pool would leave the ingress unplaceable."""
    gpu_only = {
        "workerGroups": [{"name": "gpu", "replicas": 1, "minReplicas": 1, "maxReplicas": 2, "gpus": 2, "resources": {}}]
    }
    with pytest.raises(helm.HelmError, match=r"ingress.deployment.label_selector .*s2s-serve/pool:cpu.* matches no"):
        render(gpu_only)


@pytest.mark.parametrize(
    ("values", "where"),
    [
        (
            {"serve": {"app": {"args": {"tts": {"deployment": {"num_gpus": -1}}}}}},
            "/serve/app/args/tts/deployment/num_gpus",
        ),
        ({"serve": {"app": {"args": {"llm": {"handler": {"dtype": "int3"}}}}}}, "/serve/app/args/llm/handler/dtype"),
        ({"serve": {"app": {"args": {"tts": {"replicas": 3}}}}}, "/serve/app/args/tts"),
        ({"serve": {"port": 70000}}, "/serve/port"),
        ({"workerGroups": [{"name": "gpu", "gpus": 1}]}, "/workerGroups/0"),
        ({"dataPath": "nginx"}, "/dataPath"),
        ({"haproxy": {"env": {"PATH": "/tmp"}}}, "/haproxy/env"),
        ({"haproxy": {"hardStopAfterS": 0}}, "/haproxy/hardStopAfterS"),
    ],
    ids=[
        "negative-gpus",
        "unknown-dtype",
        "unknown-field",
        "bad-port",
        "incomplete-group",
        "unknown-data-path",
        "not-a-serve-variable",
        "no-hard-stop",
    ],
)
def test_bad_values_get_a_clear_error_from_the_schema(values: dict[str, Any], where: str) -> None:
    with pytest.raises(helm.HelmError, match=f"at '{where}"):
        render(copy.deepcopy(values))


TURN = {
    "ice_servers": [
        {
            "urls": ["turn:turn.example.com:3478?transport=udp"],
            "username": "s2s",
            "credential_env": "S2S_TURN_CREDENTIAL",
        }
    ]
}


def test_webrtc_through_turn_gets_its_servers_in_the_app_and_its_credential_on_every_pod() -> None:
    values = {"serve": {"app": {"args": {"ingress": {"webrtc": TURN}}}}, "turnCredential": {"secretName": "turn"}}
    service = rayservice(values)
    jsonschema.validate(service, CRD_SCHEMA)
    (app,) = yaml.safe_load(service["spec"]["serveConfigV2"])["applications"]
    assert AppConfig.model_validate(app["args"]).ingress.webrtc.ice_servers[0].username == "s2s"
    cluster = service["spec"]["rayClusterConfig"]
    for pod in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        (container,) = pod["template"]["spec"]["containers"]
        secret = {"secretKeyRef": {"name": "turn", "key": "credential"}}
        assert {"name": "S2S_TURN_CREDENTIAL", "valueFrom": secret} in container["env"]
    assert "S2S_TURN_CREDENTIAL" not in str(rayservice())  # none by default


def test_a_turn_server_whose_credential_no_secret_provides_fails_the_render() -> None:
    with pytest.raises(helm.HelmError, match="set turnCredential.secretName"):
        render({"serve": {"app": {"args": {"ingress": {"webrtc": TURN}}}}})


REDIS_STORE = {"serve": {"app": {"args": {"ingress": {"session_store": {"kind": "redis"}}}}}}


def pod_env(service: dict[str, Any]) -> list[list[dict[str, Any]]]:
    cluster = service["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    return [pod["template"]["spec"]["containers"][0]["env"] for pod in pods]


def test_the_redis_session_store_gets_its_url_on_every_pod_from_a_secret_or_the_charts_redis() -> None:
    from_secret = render(REDIS_STORE | {"sessionStore": {"redis": {"urlSecret": {"name": "sessions", "key": "url"}}}})
    service = from_secret["s2s-serve/templates/rayservice.yaml"]
    jsonschema.validate(service, CRD_SCHEMA)
    secret = {"secretKeyRef": {"name": "sessions", "key": "url"}}
    assert all({"name": "S2S_REDIS_URL", "valueFrom": secret} in env for env in pod_env(service))
    assert "s2s-serve/templates/session-redis.yaml" not in from_secret, "no Redis of the chart's"

    ours = render(REDIS_STORE | {"sessionStore": {"redis": {"deploy": True}}})
    url = {"name": "S2S_REDIS_URL", "value": "redis://:$(S2S_REDIS_PASSWORD)@voice-session-redis:6379/0"}
    assert all(url in env for env in pod_env(ours["s2s-serve/templates/rayservice.yaml"]))
    redis = ours["s2s-serve/templates/session-redis.yaml"]
    redis_service = ours["s2s-serve/templates/session-redis-service.yaml"]
    assert redis["kind"] == "Deployment" and redis_service["metadata"]["name"] == "voice-session-redis"
    pod_labels = redis["spec"]["template"]["metadata"]["labels"]
    assert redis_service["spec"]["selector"].items() <= pod_labels.items()
    assert "S2S_REDIS_URL" not in str(rayservice()), "none by default (the ray store)"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (REDIS_STORE, "set sessionStore.redis.urlSecret.name or sessionStore.redis.deploy"),
        ({"sessionStore": {"redis": {"deploy": True, "urlSecret": {"name": "s"}}}}, "not both"),
        (
            {
                "serve": {"app": {"args": {"ingress": {"session_store": {"kind": "redis", "redis_url_env": "X"}}}}},
                "sessionStore": {"redis": {"deploy": True}},
            },
            "the chart gives the URL as S2S_REDIS_URL",
        ),
    ],
    ids=["no-redis", "two-redis", "other-variable"],
)
def test_a_redis_session_store_without_exactly_one_redis_fails_the_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render(values)


def test_tracing_sets_opentelemetrys_environment_on_every_pod_only_when_given_an_endpoint() -> None:
    def otel_env(values: dict[str, Any]) -> list[dict[str, str]]:
        cluster = rayservice(values)["spec"]["rayClusterConfig"]
        specs = [cluster["headGroupSpec"]["template"]["spec"]]
        specs += [group["template"]["spec"] for group in cluster["workerGroupSpecs"]]
        envs = [[e for e in spec["containers"][0]["env"] if e["name"].startswith("OTEL_")] for spec in specs]
        assert all(env == envs[0] for env in envs), "every pod alike"
        return envs[0]

    assert otel_env({}) == []
    tracing = {"otlpEndpoint": "http://tempo:4318", "samplingRatio": 0.1, "env": {"OTEL_BSP_SCHEDULE_DELAY": "1000"}}
    assert otel_env({"tracing": tracing}) == [
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://tempo:4318"},
        {"name": "OTEL_TRACES_SAMPLER", "value": "parentbased_traceidratio"},
        {"name": "OTEL_TRACES_SAMPLER_ARG", "value": "0.1"},
        {"name": "OTEL_BSP_SCHEDULE_DELAY", "value": "1000"},
    ]
    with pytest.raises(helm.HelmError, match="tracing"):
        render({"tracing": {"otlpEndpoint": "http://tempo:4318", "env": {"RAY_SERVE_X": "1"}}})

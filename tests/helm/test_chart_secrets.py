"""The chart's Secrets and what reads them: the chart's Redis behind a password (from a Secret
the operator names or one the chart makes), optional TLS and a NetworkPolicy that lets in only
the release's Ray pods; the session secret on every pod; Twilio's auth token; the API key;
OTLP headers. The Redis the chart runs is started here too, from the rendered script, on a
real redis-server."""

import base64
import copy
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import pytest
import redis
from test_chart import CRD_SCHEMA, REDIS_STORE, pod_env, pod_labels, rayservice, render, selects, values_of

from deployments.config import AppConfig

pytestmark = pytest.mark.fast
"""No Ray cluster and no model: part of ``make test-fast``."""

TEMPLATES = "s2s-serve/templates/"
CHARTS_REDIS = REDIS_STORE | {"sessionStore": {"redis": {"deploy": True}}}
WITH_TLS = REDIS_STORE | {"sessionStore": {"redis": {"deploy": True, "tls": {"secretName": "redis-tls"}}}}


def rendered_secrets(values: dict[str, Any] | None = None) -> dict[str, dict[str, str]]:
    """The chart's own Secrets, by name: each one's data, decoded."""
    found = {}
    for path, manifest in render(values).items():
        if manifest["kind"] == "Secret":
            assert path in {TEMPLATES + "session-secret.yaml", TEMPLATES + "session-redis-secret.yaml"}
            assert manifest["type"] == "Opaque"
            data = {key: base64.b64decode(value).decode() for key, value in manifest["data"].items()}
            found[manifest["metadata"]["name"]] = data
    return found


def from_secret(name: str, key: str) -> dict[str, Any]:
    return {"secretKeyRef": {"name": name, "key": key}}


def redis_container(values: dict[str, Any]) -> dict[str, Any]:
    deployment = render(values)[TEMPLATES + "session-redis.yaml"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def test_the_charts_redis_takes_its_password_from_a_secret_and_the_pods_put_it_in_the_url() -> None:
    made = rendered_secrets(CHARTS_REDIS)
    password = made["voice-session-redis-auth"]["password"]
    assert re.fullmatch(r"[A-Za-z0-9]{32}", password), "random, and safe in a URL as it is"
    assert rendered_secrets(CHARTS_REDIS)["voice-session-redis-auth"]["password"] != password, (
        "a template-only render (no cluster to look up) makes a new one"
    )

    container = redis_container(CHARTS_REDIS)
    env = {e["name"]: e for e in container["env"]}
    assert env["REDIS_PASSWORD"]["valueFrom"] == from_secret("voice-session-redis-auth", "password")
    assert env["REDISCLI_AUTH"]["valueFrom"] == from_secret("voice-session-redis-auth", "password")
    assert 'requirepass "$REDIS_PASSWORD"' in container["args"][0]
    assert "value" not in env["REDIS_PASSWORD"], "never written in the manifest"

    service = rayservice(CHARTS_REDIS)
    jsonschema.validate(service, CRD_SCHEMA)
    for pod in pod_env(service):
        names = [e["name"] for e in pod]
        password_env = pod[names.index("S2S_REDIS_PASSWORD")]
        assert password_env["valueFrom"] == from_secret("voice-session-redis-auth", "password")
        url = pod[names.index("S2S_REDIS_URL")]
        assert names.index("S2S_REDIS_PASSWORD") < names.index("S2S_REDIS_URL"), "$(VAR) expands earlier ones only"
        assert url == {"name": "S2S_REDIS_URL", "value": "redis://:$(S2S_REDIS_PASSWORD)@voice-session-redis:6379/0"}

    theirs = {"sessionStore": {"redis": {"deploy": True, "auth": {"existingSecret": "redis-pw", "key": "pw"}}}}
    assert "voice-session-redis-auth" not in rendered_secrets(theirs), "the operator's Secret instead"
    assert redis_container(theirs)["env"][0]["valueFrom"] == from_secret("redis-pw", "pw")
    for pod in pod_env(rayservice(theirs)):
        assert {"name": "S2S_REDIS_PASSWORD", "valueFrom": from_secret("redis-pw", "pw")} in pod

    external = {"sessionStore": {"redis": {"urlSecret": {"name": "sessions", "key": "url"}}}}
    assert "S2S_REDIS_PASSWORD" not in str(rayservice(external)), "an external Redis's URL is used as it is"
    assert "voice-session-redis-auth" not in rendered_secrets(external)


def test_with_tls_the_charts_redis_listens_with_tls_only_and_every_pod_checks_it_with_the_ca() -> None:
    container = redis_container(WITH_TLS)
    script = container["args"][0]
    for line in ("port 0", "tls-port 6379", "tls-cert-file /tls/tls.crt", "tls-ca-cert-file /tls/ca.crt"):
        assert line in script.splitlines() or f"  {line}" in script
    assert "--tls --cacert /tls/ca.crt" in container["readinessProbe"]["exec"]["command"][2]
    redis_pod = render(WITH_TLS)[TEMPLATES + "session-redis.yaml"]["spec"]["template"]["spec"]
    assert redis_pod["volumes"] == [{"name": "tls", "secret": {"secretName": "redis-tls"}}]

    service = rayservice(WITH_TLS | {"recording": {"enabled": True}})
    jsonschema.validate(service, CRD_SCHEMA)
    cluster = service["spec"]["rayClusterConfig"]
    ca_dir = "/etc/s2s-serve/session-redis-tls"
    for pod in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        spec = pod["template"]["spec"]
        (ray,) = spec["containers"]
        url = next(e["value"] for e in ray["env"] if e["name"] == "S2S_REDIS_URL")
        assert url == f"rediss://:$(S2S_REDIS_PASSWORD)@voice-session-redis:6379/0?ssl_ca_certs={ca_dir}/ca.crt"
        assert {"name": "session-redis-ca", "mountPath": ca_dir, "readOnly": True} in ray["volumeMounts"]
        volume = {"secretName": "redis-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]}
        assert {"name": "session-redis-ca", "secret": volume} in spec["volumes"], "the CA only, not the key"
    assert "session-redis-ca" not in str(rayservice(CHARTS_REDIS))


def test_only_the_ray_pods_of_the_release_reach_the_charts_redis() -> None:
    manifests = render(CHARTS_REDIS)
    policy = manifests[TEMPLATES + "session-redis-networkpolicy.yaml"]
    assert policy["kind"] == "NetworkPolicy" and policy["spec"]["policyTypes"] == ["Ingress"]
    redis_pod = manifests[TEMPLATES + "session-redis.yaml"]["spec"]["template"]
    assert selects(policy["spec"]["podSelector"], redis_pod["metadata"]["labels"]), "it guards the Redis pod"
    (rule,) = policy["spec"]["ingress"]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}, "no namespace or address block: this namespace's pods only"
    (container,) = redis_pod["spec"]["containers"]
    assert rule["ports"] == [{"protocol": "TCP", "port": container["ports"][0]["containerPort"]}]
    ray_pods = pod_labels(manifests[TEMPLATES + "rayservice.yaml"])
    assert len(ray_pods) >= 3
    for name, labels in ray_pods.items():
        assert selects(peer["podSelector"], labels), f"{name} pods cannot reach Redis"
    head = ray_pods["head"]
    assert not selects(peer["podSelector"], head | {"app.kubernetes.io/instance": "another"}), "another release"
    not_ray = {k: v for k, v in head.items() if k != "ray.io/node-type"}
    assert not selects(peer["podSelector"], not_ray), "a pod of the release that KubeRay did not make"
    external = {"sessionStore": {"redis": {"urlSecret": {"name": "sessions"}}}}
    assert TEMPLATES + "session-redis-networkpolicy.yaml" not in render(REDIS_STORE | external)


@pytest.mark.parametrize(
    ("redis_values", "where"),
    [
        ({"deploy": True, "auth": {"enabled": False}}, "/sessionStore/redis/auth/enabled"),
        ({"deploy": True, "networkPolicy": {"enabled": False}}, "/sessionStore/redis/networkPolicy/enabled"),
        ({"deploy": True, "auth": {"key": ""}}, "/sessionStore/redis/auth/key"),
    ],
    ids=["no-password", "open-to-every-pod", "no-key"],
)
def test_the_schema_refuses_a_charts_redis_without_a_password_or_open_to_other_pods(
    redis_values: dict[str, Any], where: str
) -> None:
    with pytest.raises(helm.HelmError, match=f"at '{where}'"):
        render({"sessionStore": {"redis": redis_values}})
    render({"sessionStore": {"redis": redis_values | {"deploy": False, "auth": {"enabled": False}}}})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_certificates(directory: Path) -> None:
    """A CA and a server certificate for ``localhost`` signed by it, as cert-manager lays
    them out in a TLS Secret (tls.crt, tls.key, ca.crt)."""

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
        "-keyout", "ca.key", "-out", "ca.crt",
    )  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "tls.key", "-out", "tls.csr")
    (directory / "san.ext").write_text("subjectAltName=DNS:localhost\n")
    openssl(
        "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "2", "-extfile", "san.ext", "-out", "tls.crt",
    )  # fmt: skip


@pytest.fixture
def charts_redis(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, str, dict[str, str]]]:
    """The chart's Redis container run here: its rendered script under ``sh`` with its
    environment (the chart-made password), on a free port; yields the ray pods' URL as they
    would expand it (host and paths moved to this machine), the probe's command and env."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.skip("needs redis-server and redis-cli")
    values = request.param
    tls = bool(values["sessionStore"]["redis"].get("tls"))
    if tls:
        write_certificates(tmp_path)
    password = rendered_secrets(values)["voice-session-redis-auth"]["password"]
    container = redis_container(values)
    port = free_port()
    listen = f"--tls-port {port}" if tls else f"--port {port}"
    script = container["args"][0].replace("redis-server -", f"redis-server - {listen} --dir {tmp_path}")
    script = script.replace("/tls/", f"{tmp_path}/")
    env = os.environ | {e["name"]: password for e in container["env"]}
    server = subprocess.Popen([*container["command"], script], env=env, stdout=subprocess.DEVNULL)
    url = next(e["value"] for e in pod_env(rayservice(values))[0] if e["name"] == "S2S_REDIS_URL")
    url = url.replace("$(S2S_REDIS_PASSWORD)", password).replace("voice-session-redis:6379", f"localhost:{port}")
    url = url.replace("/etc/s2s-serve/session-redis-tls/", f"{tmp_path}/")
    probe = container["readinessProbe"]["exec"]["command"][2]
    probe = probe.replace("redis-cli", f"redis-cli -p {port}").replace("/tls/", f"{tmp_path}/")
    try:
        yield url, probe, env
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.parametrize("charts_redis", [CHARTS_REDIS, WITH_TLS], ids=["plain", "tls"], indirect=True)
def test_the_charts_redis_as_rendered_answers_only_with_its_password(
    charts_redis: tuple[str, str, dict[str, str]],
) -> None:
    url, probe, env = charts_redis
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    deadline = time.monotonic() + 10
    while True:
        try:
            assert client.ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    client.set("s2s:check", "1")
    without = redis.Redis.from_url(url.replace(f":{env['REDIS_PASSWORD']}@", "@"), socket_connect_timeout=2)
    with pytest.raises(redis.AuthenticationError):
        without.get("s2s:check")
    assert subprocess.run(["sh", "-c", probe], env=env, check=False).returncode == 0, "the readiness probe"
    no_auth = {k: v for k, v in env.items() if k != "REDISCLI_AUTH"}
    assert subprocess.run(["sh", "-c", probe], env=no_auth, check=False).returncode != 0
    if url.startswith("rediss://"):
        plain = url.replace("rediss://", "redis://").partition("?")[0]
        with pytest.raises(redis.ConnectionError):
            redis.Redis.from_url(plain, socket_connect_timeout=2, socket_timeout=2).ping()


@pytest.mark.parametrize(
    "values",
    [None, REDIS_STORE | {"sessionStore": {"redis": {"deploy": True}}}, {"serve": {"app": {"args": {}}}}],
    ids=["ray-store", "redis-store", "no-ingress-args"],
)
def test_every_pod_gets_the_session_secret_whatever_the_store(values: dict[str, Any] | None) -> None:
    made = rendered_secrets(values)["voice-session-secret"]["secret"]
    assert re.fullmatch(r"[A-Za-z0-9]{64}", made)
    for env in pod_env(rayservice(values)):
        assert {"name": "S2S_SESSION_SECRET", "valueFrom": from_secret("voice-session-secret", "secret")} in env

    theirs = copy.deepcopy(values or {})
    theirs.setdefault("sessionStore", {})["secret"] = {"name": "keys", "key": "digest-key"}
    assert "voice-session-secret" not in rendered_secrets(theirs)
    for env in pod_env(rayservice(theirs)):
        assert {"name": "S2S_SESSION_SECRET", "valueFrom": from_secret("keys", "digest-key")} in env


def test_a_session_secret_read_from_another_variable_fails_the_render() -> None:
    store = {"serve": {"app": {"args": {"ingress": {"session_store": {"secret_env": "MY_KEY"}}}}}}
    with pytest.raises(helm.HelmError, match="secret_env"):
        render(store)


def test_twilios_auth_token_reaches_every_pod_from_its_secret_and_the_app_reads_it() -> None:
    values = {"twilio": {"authTokenSecret": {"name": "twilio"}}}
    service = rayservice(values)
    jsonschema.validate(service, CRD_SCHEMA)
    for env in pod_env(service):
        assert {"name": "S2S_TWILIO_AUTH_TOKEN", "valueFrom": from_secret("twilio", "authToken")} in env
    args = values_of(values)
    assert args["ingress"]["twilio"] == {"auth_token_env": "S2S_TWILIO_AUTH_TOKEN"}
    assert args["ingress"]["max_sessions"] == 200, "the rest of the ingress's args as they were"
    assert AppConfig.model_validate(args).ingress.twilio.auth_token_env == "S2S_TWILIO_AUTH_TOKEN"
    assert "S2S_TWILIO_AUTH_TOKEN" not in str(rayservice()), "none by default"
    assert "twilio" not in values_of(None)["ingress"]

    def reading(name: str) -> dict[str, Any]:
        return {"serve": {"app": {"args": {"ingress": {"twilio": {"auth_token_env": name}}}}}}

    with pytest.raises(helm.HelmError, match="set twilio.authTokenSecret.name"):
        render(reading("S2S_TWILIO_AUTH_TOKEN"))
    with pytest.raises(helm.HelmError, match="leave it unset"):
        render(reading("MY_TOKEN") | values)


def test_the_api_key_reaches_every_pod_from_its_secret_and_the_app_reads_it() -> None:
    values = {"apiKeySecret": {"name": "api-key"}}
    service = rayservice(values)
    jsonschema.validate(service, CRD_SCHEMA)
    for env in pod_env(service):
        assert {"name": "S2S_API_KEY", "valueFrom": from_secret("api-key", "apiKey")} in env
    args = values_of(values)
    assert args["ingress"]["api_key_env"] == "S2S_API_KEY"
    assert args["ingress"]["max_sessions"] == 200, "the rest of the ingress's args as they were"
    assert AppConfig.model_validate(args).ingress.api_key_env == "S2S_API_KEY"
    assert "S2S_API_KEY" not in str(rayservice()), "none by default"
    assert "api_key_env" not in values_of(None)["ingress"]
    theirs = {"apiKeySecret": {"name": "keys", "key": "client-key"}}
    for env in pod_env(rayservice(theirs)):
        assert {"name": "S2S_API_KEY", "valueFrom": from_secret("keys", "client-key")} in env

    def reading(name: str) -> dict[str, Any]:
        return {"serve": {"app": {"args": {"ingress": {"api_key_env": name}}}}}

    assert values_of(reading("S2S_API_KEY") | values)["ingress"]["api_key_env"] == "S2S_API_KEY", "as the chart sets"
    with pytest.raises(helm.HelmError, match="set apiKeySecret.name"):
        render(reading("S2S_API_KEY"))
    with pytest.raises(helm.HelmError, match="api_key_env: the chart gives the API key as S2S_API_KEY"):
        render(reading("MY_KEY") | values)
    with pytest.raises(helm.HelmError, match="at '/apiKeySecret/key'"):
        render({"apiKeySecret": {"name": "api-key", "key": ""}})


def test_otlp_headers_come_from_a_secret_on_every_pod_and_not_twice() -> None:
    tracing = {"otlpEndpoint": "https://otlp.example:4318", "headersSecret": {"name": "otlp"}}
    service = rayservice({"tracing": tracing})
    jsonschema.validate(service, CRD_SCHEMA)
    for env in pod_env(service):
        assert {"name": "OTEL_EXPORTER_OTLP_HEADERS", "valueFrom": from_secret("otlp", "headers")} in env
    assert "OTEL_EXPORTER_OTLP_HEADERS" not in str(rayservice({"tracing": {"otlpEndpoint": "http://tempo:4318"}}))
    both = tracing | {"env": {"OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer x"}}
    with pytest.raises(helm.HelmError, match="not both"):
        render({"tracing": both})
    with pytest.raises(helm.HelmError, match="set tracing.otlpEndpoint too"):
        render({"tracing": {"headersSecret": {"name": "otlp"}}})

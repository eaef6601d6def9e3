"""Write ``helm/s2s-serve/values.schema.json``: the chart's own values, and under
``serve.app.args`` the application's :class:`deployments.config.AppConfig` as pydantic
describes it, so ``helm install`` refuses what ``build_app`` would refuse, before anything
reaches the cluster. ``python helm/values_schema.py`` (``make chart-schema``) after changing
either; ``tests/helm`` fails while the file is stale."""

import json
from pathlib import Path
from typing import Any

from deployments.config import AppConfig

SCHEMA = Path(__file__).parent / "s2s-serve" / "values.schema.json"

_STRING = {"type": "string"}
_RESOURCES = {
    "type": "object",
    "properties": {"requests": {"type": "object"}, "limits": {"type": "object"}},
    "additionalProperties": False,
}
_PLACEMENT = {"nodeSelector": {"type": "object"}, "tolerations": {"type": "array", "items": {"type": "object"}}}
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_LABEL_KEY = {"type": "string", "pattern": rf"^({_DNS_LABEL}(\.{_DNS_LABEL})*/)?{_LABEL_NAME}$"}
"""A Kubernetes label (or annotation) key: the sidecar's label and folder annotation."""


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or [], "additionalProperties": False}


def _secret_ref(name: str = "name") -> dict[str, Any]:
    """An existing Secret's name (empty: none) and the key that holds the value."""
    return _object({name: _STRING, "key": {"type": "string", "minLength": 1}})


_QUANTITY = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"}
"""A byte quantity as Kubernetes writes one, in the forms the chart converts (s2s-serve.bytes)."""
_MUST_BE_ON = {"const": True}

_CHARTS_REDIS_IS_CLOSED = {
    "if": {"properties": {"deploy": {"const": True}}, "required": ["deploy"]},
    "then": {
        "properties": {
            "auth": {"properties": {"enabled": _MUST_BE_ON}},
            "networkPolicy": {"properties": {"enabled": _MUST_BE_ON}},
        }
    },
}
"""The chart's Redis (deploy) holds every session's record and resume-token digest: it never
runs without a password (auth.enabled) or reachable by pods other than this release's Ray
pods (networkPolicy.enabled)."""


def values_schema() -> dict[str, Any]:
    app_config = AppConfig.model_json_schema()
    definitions = app_config.pop("$defs")
    worker_group = _object(
        {
            "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
            "replicas": {"type": "integer", "minimum": 0},
            "minReplicas": {"type": "integer", "minimum": 0},
            "maxReplicas": {"type": "integer", "minimum": 1},
            "gpus": {"type": "integer", "minimum": 0},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "resources": _RESOURCES,
            **_PLACEMENT,
        },
        ["name", "replicas", "minReplicas", "maxReplicas", "gpus", "resources"],
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "s2s-serve chart values",
        **_object(
            {
                "image": _object(
                    {
                        "repository": _STRING,
                        "tag": _STRING,
                        "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]},
                    },
                    ["repository", "tag"],
                ),
                "imagePullSecrets": {"type": "array", "items": {"type": "object"}},
                "hubToken": _object({"secretName": _STRING, "key": _STRING}),
                "turnCredential": _object({"secretName": _STRING, "key": _STRING}),
                "sessionStore": _object(
                    {
                        "secret": _secret_ref(),
                        "redis": _object(
                            {
                                "urlSecret": _object({"name": _STRING, "key": _STRING}),
                                "deploy": {"type": "boolean"},
                                "image": _STRING,
                                "auth": _object(
                                    {
                                        "enabled": {"type": "boolean"},
                                        "existingSecret": _STRING,
                                        "key": {"type": "string", "minLength": 1},
                                    }
                                ),
                                "tls": _object({"secretName": _STRING}),
                                "networkPolicy": _object({"enabled": {"type": "boolean"}}),
                                "resources": _RESOURCES,
                                **_PLACEMENT,
                            }
                        )
                        | _CHARTS_REDIS_IS_CLOSED,
                    }
                ),
                "twilio": _object({"authTokenSecret": _secret_ref()}),
                "apiKeySecret": _secret_ref(),
                "recording": _object(
                    {
                        "enabled": {"type": "boolean"},
                        "mode": {"enum": ["on_request", "always"]},
                        "mountPath": {"type": "string", "pattern": "^/"},
                        "existingClaim": _STRING,
                        "sizeLimit": _QUANTITY,
                        "maxSessionS": {"type": "number", "exclusiveMinimum": 0},
                        "maxTotalBytes": {"type": ["integer", "null"], "minimum": 1 << 20},
                        "retentionDays": {"type": ["number", "null"], "exclusiveMinimum": 0},
                    }
                ),
                "tracing": _object(
                    {
                        "otlpEndpoint": {"type": "string", "pattern": "^(https?://.+)?$"},
                        "samplingRatio": {"type": "number", "minimum": 0, "maximum": 1},
                        "headersSecret": _secret_ref(),
                        "env": {
                            "type": "object",
                            "patternProperties": {"^OTEL_[A-Z0-9_]+$": _STRING},
                            "additionalProperties": False,
                        },
                    }
                ),
                "serve": _object(
                    {
                        "proxyLocation": {"enum": ["Disabled", "HeadOnly", "EveryNode"]},
                        "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                        "app": _object(
                            {"name": _STRING, "routePrefix": _STRING, "importPath": _STRING, "args": app_config},
                            ["name", "routePrefix", "importPath", "args"],
                        ),
                    },
                    ["proxyLocation", "port", "app"],
                ),
                "dataPath": {"enum": ["haproxy", "proxy"]},
                "haproxy": _object(
                    {
                        "threads": {"type": "integer", "minimum": 1},
                        "hardStopAfterS": {"type": "integer", "minimum": 1},
                        "env": {
                            "type": "object",
                            "patternProperties": {"^RAY_SERVE_[A-Z0-9_]+$": _STRING},
                            "additionalProperties": False,
                        },
                    }
                ),
                "head": _object({"resources": _RESOURCES, **_PLACEMENT}),
                "workerGroups": {"type": "array", "items": worker_group, "minItems": 1},
                "autoscaler": _object(
                    {
                        "idleTimeoutSeconds": {"type": "integer", "minimum": 0},
                        "upscalingMode": {"enum": ["Default", "Aggressive", "Conservative"]},
                    }
                ),
                "service": _object(
                    {"type": {"enum": ["ClusterIP", "NodePort", "LoadBalancer"]}, "annotations": {"type": "object"}}
                ),
                "ingress": _object(
                    {
                        "enabled": {"type": "boolean"},
                        "className": _STRING,
                        "host": _STRING,
                        "tls": {"type": "array"},
                        "annotations": {"type": "object"},
                    }
                ),
                "serviceMonitor": _object({"enabled": {"type": "boolean"}, "interval": _STRING}),
                "grafana": _object(
                    {
                        "dashboard": _object(
                            {
                                "enabled": {"type": "boolean"},
                                "label": _LABEL_KEY,
                                "labelValue": {"type": "string", "pattern": rf"^({_LABEL_NAME})?$"},
                                "folderAnnotation": _LABEL_KEY,
                                "folder": _STRING,
                            }
                        )
                    }
                ),
            },
            ["image", "serve", "workerGroups"],
        ),
        "$defs": definitions,
    }


if __name__ == "__main__":
    SCHEMA.write_text(json.dumps(values_schema(), indent=2) + "\n")
    print(f"wrote {SCHEMA}")

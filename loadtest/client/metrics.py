"""The server's own view: Prometheus metrics scraped from Ray's metrics endpoints.

Only the application's metrics (``s2s_*``, exported by Ray as ``ray_s2s_*``) and Serve's
per-replica request counters are kept, summed per name and label set, so a report can show
what changed over a run.
"""

import os
import re
import time
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

KEPT_PREFIXES = ("s2s_", "ray_s2s_", "ray_serve_deployment_request_counter")


def scrape(urls: list[str]) -> dict[str, float]:
    """``{'name{label="v",...}': value}`` summed over ``urls``; unreachable ones are skipped."""
    values: dict[str, float] = {}
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                text = reply.read().decode()
        except OSError:
            continue
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if not sample.name.startswith(KEPT_PREFIXES):
                    continue
                labels = ",".join(
                    f'{key}="{value}"'
                    for key, value in sorted(sample.labels.items())
                    if key in ("deployment", "replica", "reason", "code", "status", "outcome", "le")
                )
                key = f"{sample.name}{{{labels}}}"
                values[key] = values.get(key, 0.0) + sample.value
    return values


def export_interval_s() -> float:
    """How often Ray exports what a process recorded: its ``metrics_report_interval_ms``, 10 s
    unless the environment the server shares with this client sets it (the test suite sets 2 s)."""
    return int(os.environ.get("RAY_metrics_report_interval_ms", "10000")) / 1000  # noqa: SIM112 (Ray spells it so)


def settled_scrape(urls: list[str], ended_at: float, timeout_s: float = 45.0) -> tuple[dict[str, float], float]:
    """A scrape that has caught up with the run that ended at ``ended_at`` (monotonic):
    taken at least one export interval after it, and equal to the scrape before it (nothing
    left in flight); returns it and its age after the end, in seconds. After ``timeout_s``,
    the last scrape, with its age: a report says how old its server view is."""
    time.sleep(max(0.0, ended_at + export_interval_s() - time.monotonic()))
    previous = scrape(urls)
    while True:
        time.sleep(2.0)  # polling another process's endpoint: there is no event to wait on
        values = scrape(urls)
        age = time.monotonic() - ended_at
        if values == previous or age >= timeout_s:
            return values, round(age, 1)
        previous = values


def _split(key: str) -> tuple[str, dict[str, str]]:
    name, _, labels = key.partition("{")
    return name, dict(re.findall(r'(\w+)="([^"]*)"', labels))


def server_view(deltas: dict[str, float]) -> dict[str, Any]:
    """What the server counted over a run: totals by tag, latency histograms as count and
    bucket-bound percentiles (ms), and the requests each replica of each deployment served."""
    totals: dict[str, float] = {}
    buckets: dict[str, dict[float, float]] = {}
    per_replica: dict[str, dict[str, float]] = {}
    for key, value in deltas.items():
        name, labels = _split(key)
        name = name.removeprefix("ray_")
        if name.startswith("serve_deployment_request_counter"):
            if not value:  # a replica of an earlier run, or one that served nothing
                continue
            replicas = per_replica.setdefault(labels.get("deployment", "?"), {})
            replicas[labels.get("replica", "?")] = replicas.get(labels.get("replica", "?"), 0) + value
        elif name.endswith("_bucket"):
            histogram = buckets.setdefault(name.removesuffix("_bucket"), {})
            bound = float(labels["le"])
            histogram[bound] = histogram.get(bound, 0) + value
        elif not name.endswith(("_sum", "_count")):
            tag = ",".join(f"{k}={v}" for k, v in labels.items() if k not in ("deployment", "replica"))
            total = f"{name}{{{tag}}}" if tag else name
            totals[total] = totals.get(total, 0) + value
    return {
        "totals": totals,
        "latency_ms": {name: _bucket_percentiles(histogram) for name, histogram in buckets.items()},
        "requests_per_replica": per_replica,
    }


def _bucket_percentiles(cumulative: dict[float, float]) -> dict[str, float | None]:
    """Upper bucket bounds (ms) under which 50/95/99 % of the observations fall (None: above
    the largest finite bound, or no observations)."""
    bounds = sorted(cumulative)
    count = cumulative[bounds[-1]] if bounds else 0
    view: dict[str, float | None] = {"count": count}
    for p in (50, 95, 99):
        bound = next((b for b in bounds if count and cumulative[b] >= p / 100 * count), None)
        view[f"p{p}_le"] = None if bound is None or bound == float("inf") else bound * 1000
    return view

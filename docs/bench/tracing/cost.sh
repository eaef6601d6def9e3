#!/usr/bin/env bash
# Tracing's CPU cost (docs/observability.md): `make serve-loadtest`'s serving layer (synthetic
# engines, HAProxy) under 120 interrupting sessions, first with tracing off, then on at ratio
# 1.0 (every session traced) exporting to a local OTLP/HTTP receiver that decodes and discards
# (oteltest's sink; its own CPU is not the server's and is left out). `s2s-bench cpu` reads
# every process's CPU over 40 s once each ingress replica holds 55 sessions. Prints the server's
# ms of CPU per session-second (every role but the load client) off and on, and the load test's
# counters. Reports in /tmp/runs/tracing-*. About 7 minutes; run it on an otherwise quiet machine.
set -eu
cd "$(dirname "$0")/../../.."
runs=/tmp/runs
mkdir -p $runs

measure() {  # $1: the run's name; the rest: the launcher's environment
  name=$1
  shift
  env "$@" RAY_SERVE_HAPROXY_NBTHREAD=1 .venv/bin/python -m deployments.serve_local cluster/loadtest.yaml \
    --port 8000 --data-path haproxy --stop-within 20 > $runs/tracing-$name.server.log 2>&1 &
  server=$!
  for _ in $(seq 1 240); do grep -q "Voice agent ready" $runs/tracing-$name.server.log && break; sleep 1; done
  .venv/bin/s2s-bench cpu --wait-for 55 --seconds 40 --sessions 120 > $runs/tracing-$name.cpu.json &
  cpu=$!
  .venv/bin/s2s-bench load --url ws://127.0.0.1:8000/v1/realtime --sessions 120 --turns 1000 --duration-s 60 \
    --ramp-s 15 --interrupt-rate 0.3 --cancel-rate 0.1 --seed 3 --fail-on-stale --fail-on-leak \
    --out $runs/tracing-$name.json > $runs/tracing-$name.client.log 2>&1
  wait $cpu
  kill -INT $server
  wait $server || true
}

measure off
.venv/bin/python - <<'PY' > $runs/tracing-receiver.log 2>&1 &
import http.server
import logging
import threading

from oteltest.sink import HttpSink
from oteltest.sink.handler import RequestHandler


class Discard(RequestHandler):
    def handle_trace(self, request, headers): ...
    def handle_metrics(self, request, headers): ...
    def handle_logs(self, request, headers): ...


http.server.BaseHTTPRequestHandler.log_message = lambda *args: None  # this process only
HttpSink(Discard(), logging.getLogger("receiver"), port=4319).start()
threading.Event().wait()
PY
receiver=$!
measure on OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4319
kill $receiver
.venv/bin/python - $runs <<'PY'
import json
import sys
from pathlib import Path

runs = Path(sys.argv[1])
result = {}
for name in ("off", "on"):
    cpu = json.loads((runs / f"tracing-{name}.cpu.json").read_text())
    server = sum(row["cpu_s"] for role, row in cpu["roles"].items() if role != "client")
    counts = json.loads((runs / f"tracing-{name}.json").read_text())["counts"]
    result[name] = {
        "server_ms_per_session_s": round(1000 * server / (cpu["window_s"] * cpu["sessions"]), 3),
        "ingress_ms_per_session_s": cpu["roles"]["ingress"]["ms_per_session_s"],
        **{key: counts[key] for key in ("turns", "stale_bytes", "leaks", "failed", "timeouts")},
    }
off, on = result["off"]["server_ms_per_session_s"], result["on"]["server_ms_per_session_s"]
print(json.dumps(result | {"tracing_cost_percent": round(100 * (on - off) / off, 1)}, indent=2))
PY

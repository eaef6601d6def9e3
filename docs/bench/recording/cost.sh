#!/usr/bin/env bash
# Recording's CPU cost (docs/recording.md, "What it costs"): the CPU profile (cluster/local.yaml,
# real models, HAProxy) under 20 sessions that stream their microphone all the time, first with
# recording off, then with every session recorded (mode: always); `s2s-bench cpu` reads every
# process's CPU over 120 s once the ramp is done. Recording's cost is the ingress row's
# ms_per_session_s with recording, less without (the target: at most 50, 5 % of a core per
# session-second); then every recording is checked whole (its length is its session's, not
# truncated, no write error). Reports in /tmp/runs/recording-*. About 12 minutes; heavy: run it
# on an otherwise quiet machine. SESSIONS=n for another count.
set -eu
cd "$(dirname "$0")/../../.."
sessions=${SESSIONS:-20}
runs=/tmp/runs
recordings=$runs/recordings
mkdir -p $runs
rm -rf $recordings
# The same profile with every session recorded (generated, so that it cannot drift from it).
.venv/bin/python - "$recordings" > $runs/recording-local.yaml <<'PY'
import sys

import yaml

with open("cluster/local.yaml") as file:
    config = yaml.safe_load(file)
config["applications"][0]["args"]["ingress"]["recording"] = {"directory": sys.argv[1], "mode": "always"}
print(yaml.safe_dump(config, sort_keys=False))
PY

measure() {  # $1: the Serve config, $2: the run's name
  .venv/bin/python -m deployments.serve_local "$1" --port 8000 --stop-within 20 > $runs/recording-$2.server.log 2>&1 &
  server=$!
  for _ in $(seq 1 450); do curl -sf http://127.0.0.1:8000/readyz > /dev/null && break; sleep 2; done
  .venv/bin/s2s-bench load --url ws://127.0.0.1:8000/v1 --sessions $sessions --turns 1000 --duration-s 180 \
    --ramp-s 30 --continuous-mic --no-calibrate --seed 3 --out $runs/recording-$2.json > $runs/recording-$2.client.log 2>&1 &
  client=$!
  sleep 40  # the ramp and a little: the window then holds every session
  .venv/bin/s2s-bench cpu --seconds 120 --sessions $sessions > $runs/recording-$2.cpu.json
  wait $client
  kill -INT $server
  wait $server
}

measure cluster/local.yaml off
measure $runs/recording-local.yaml always
.venv/bin/python - $runs <<'PY'
import json
import sys
from datetime import datetime
from pathlib import Path

runs = Path(sys.argv[1])
ingress = {name: json.loads((runs / f"recording-{name}.cpu.json").read_text())["roles"]["ingress"] for name in ("off", "always")}
bad = []
reports = [json.loads(path.read_text()) for path in (runs / "recordings").glob("*.json")]
for report in reports:
    recording = report["recording"]
    span = (datetime.fromisoformat(report["ended_at"]) - datetime.fromisoformat(report["started_at"])).total_seconds()
    if recording.get("error") or recording["truncated"] or abs(recording.get("duration_s", 0) - span) > 2:
        bad.append({"session_id": report["session_id"], "span_s": span, **recording})
cost = ingress["always"]["ms_per_session_s"] - ingress["off"]["ms_per_session_s"]
print(json.dumps({"ingress": ingress, "recording_ms_per_session_s": round(cost, 3), "recordings": len(reports), "bad": bad}, indent=2))
PY

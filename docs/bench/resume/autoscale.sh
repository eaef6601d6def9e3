#!/usr/bin/env bash
# Issue 40, the ingress autoscaled under live sessions (2 -> 3 -> 2 by Serve's autoscaler, no
# new version): cluster/loadtest.yaml with the ingress on autoscaling_config (2 to 3
# replicas, 40 sessions each), 30 long sessions for the whole run ("long") and 70 more from
# 20 s in for 70 s ("burst"): the burst scales the ingress up, its end scales it down while
# the long sessions go on. Both harnesses resume (--resume). Nothing else running.
set -u
cd /work/main
out=docs/bench/resume
.venv/bin/python -c "
import yaml
config = yaml.safe_load(open('cluster/loadtest.yaml'))
deployment = config['applications'][0]['args']['ingress']['deployment']
deployment.pop('num_replicas')
deployment['autoscaling_config'] = {'min_replicas': 2, 'max_replicas': 3, 'target_ongoing_requests': 40,
    'upscale_delay_s': 3, 'downscale_delay_s': 10, 'metrics_interval_s': 1, 'look_back_period_s': 5}
yaml.safe_dump(config, open('/tmp/runs/autoscale.yaml', 'w'))"
RAY_SERVE_HAPROXY_NBTHREAD=1 .venv/bin/python -m deployments.serve_local /tmp/runs/autoscale.yaml --port 8000 --data-path haproxy --stop-within 20 > /tmp/runs/autoscale.server.log 2>&1 &
server=$!
for i in $(seq 1 300); do curl -sf http://127.0.0.1:8000/readyz >/dev/null && break; sleep 2; done
common="--url ws://127.0.0.1:8000/v1/realtime --turns 1000 --interrupt-rate 0.3 --resume --fail-on-stale --fail-on-leak"
.venv/bin/s2s-bench load $common --sessions 30 --duration-s 200 --ramp-s 10 --seed 3 --out $out/autoscale-long-30.json > /tmp/runs/autoscale.long.log 2>&1 &
long=$!
sleep 20
.venv/bin/s2s-bench load $common --sessions 70 --duration-s 70 --ramp-s 20 --seed 4 --out $out/autoscale-burst-70.json > /tmp/runs/autoscale.burst.log 2>&1 &
burst=$!
# The harness's report has the replica counts over time (its `timeline`).
wait $burst; echo "burst rc=$?"
wait $long; echo "long rc=$?"
kill -INT $server; wait $server

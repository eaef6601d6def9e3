#!/usr/bin/env bash
# usage: cpu.sh NAME CONFIG  (120 sessions, seed 3; the CPU window is 100 s once the ramp is done)
set -u
name=$1; config=$2
cd /work/main
RAY_SERVE_HAPROXY_NBTHREAD=1 .venv/bin/python -m deployments.serve_local $config --port 8000 --data-path haproxy --stop-within 20 > /tmp/runs/$name.server.log 2>&1 &
server=$!
for i in $(seq 1 300); do curl -sf http://127.0.0.1:8000/readyz >/dev/null && break; sleep 2; done
.venv/bin/s2s-bench load --url ws://127.0.0.1:8000/v1/realtime --sessions 120 --turns 1000 --duration-s 180 --ramp-s 60 --interrupt-rate 0.3 --cancel-rate 0.1 --seed 3 --out /tmp/runs/$name.json --fail-on-stale > /tmp/runs/$name.client.log 2>&1 &
client=$!
sleep 70  # the ramp (60 s) and a little: the window then holds all 120 sessions
.venv/bin/s2s-bench cpu --seconds 100 --sessions 120 > /tmp/runs/$name.cpu.json 2>&1
wait $client
echo "$name rc=$?" >> /tmp/runs/summary.txt
kill -INT $server; wait $server
sleep 5

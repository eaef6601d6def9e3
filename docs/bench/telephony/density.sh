#!/usr/bin/env bash
# Serving-layer density of the Twilio route beside the Realtime route: one server
# (cluster/loadtest.yaml, synthetic engines, HAProxy), 50 sessions of each, back to back,
# 20 s ramp, 140 s in all, no interruptions (the same work per session on both routes); the CPU of every process is read
# over 90 s once the ramp is done (s2s-bench cpu). Reports in /tmp/runs/telephony-*.
set -u
cd /work/main
sessions=50
RAY_SERVE_HAPROXY_NBTHREAD=1 .venv/bin/python -m deployments.serve_local cluster/loadtest.yaml --port 8000 --data-path haproxy --stop-within 20 > /tmp/runs/telephony-server.log 2>&1 &
server=$!
for i in $(seq 1 300); do curl -sf http://127.0.0.1:8000/readyz >/dev/null && break; sleep 2; done
.venv/bin/s2s-bench load --url ws://127.0.0.1:8000/v1/realtime --sessions $sessions --turns 1000 --duration-s 120 --ramp-s 20 --interrupt-rate 0 --seed 3 --out /tmp/runs/telephony-realtime.json > /tmp/runs/telephony-realtime.client.log 2>&1 &
client=$!
sleep 25  # the ramp and a little: the window then holds every session
.venv/bin/s2s-bench cpu --seconds 90 --sessions $sessions > /tmp/runs/telephony-realtime.cpu.json 2>&1
wait $client
.venv/bin/s2s-bench telephony --url ws://127.0.0.1:8000/v1 --sessions $sessions --duration-s 120 --ramp-s 20 --interrupt-rate 0 --seed 3 > /tmp/runs/telephony-twilio.json 2> /tmp/runs/telephony-twilio.client.log &
client=$!
sleep 25
.venv/bin/s2s-bench cpu --seconds 90 --sessions $sessions > /tmp/runs/telephony-twilio.cpu.json 2>&1
wait $client
kill -INT $server; wait $server

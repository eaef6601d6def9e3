#!/usr/bin/env bash
# (c9): the store's cost after its writes were batched per replica, back to back, nothing else
# running: the ray store (cluster/loadtest.yaml as committed), no store, the redis store; each
# by cpu.sh (120 sessions, seed 3, CPU read over 100 s), then Redis's memory for the records.
cd /work/main
for kind in none redis; do
  .venv/bin/python -c "
import yaml
config = yaml.safe_load(open('cluster/loadtest.yaml'))
config['applications'][0]['args']['ingress']['session_store'] = {'kind': '$kind'}
yaml.safe_dump(config, open('/tmp/runs/store-$kind.yaml', 'w'))"
done
bash docs/bench/session-store/cpu.sh batched-on cluster/loadtest.yaml
bash docs/bench/session-store/cpu.sh batched-off /tmp/runs/store-none.yaml
redis-server --port 6390 --save "" --appendonly no >/dev/null 2>&1 &
rs=$!
S2S_REDIS_URL=redis://127.0.0.1:6390/0 bash docs/bench/session-store/cpu.sh batched-redis /tmp/runs/store-redis.yaml
redis-cli -p 6390 info memory | grep used_memory: > /tmp/runs/redis-mem.txt
redis-cli -p 6390 dbsize >> /tmp/runs/redis-mem.txt
redis-cli -p 6390 --bigkeys >> /tmp/runs/redis-mem.txt 2>&1
kill $rs

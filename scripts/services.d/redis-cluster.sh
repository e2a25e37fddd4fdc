#!/usr/bin/env bash
# Start the local 3-master Redis Cluster the redis_cluster test case uses (127.0.0.1:7101-7103).
#
# Idempotent: does nothing when the cluster already answers with cluster_state:ok. Needs only
# the distribution's redis-server and redis-cli (Debian `redis-server` >= 7.0). The nodes keep
# nothing on disk but their nodes.conf, in a temp dir (RELAYMQ_REDIS_CLUSTER_DIR to override).
# Stop it with: RELAYMQ_REDIS_CLUSTER_STOP=1 bash scripts/services.d/redis-cluster.sh
set -euo pipefail

PORTS=(${RELAYMQ_REDIS_CLUSTER_PORTS:-7101 7102 7103})
DIR=${RELAYMQ_REDIS_CLUSTER_DIR:-${TMPDIR:-/tmp}/relaymq-redis-cluster}

for tool in redis-server redis-cli; do
  if ! command -v "$tool" >/dev/null; then
    echo "redis-cluster: $tool not found (apt-get install redis-server)" >&2
    exit 1
  fi
done

ping() { redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | grep -q PONG; }
cluster_ok() { redis-cli -h 127.0.0.1 -p "${PORTS[0]}" cluster info 2>/dev/null | grep -q 'cluster_state:ok'; }
stop_all() {
  for port in "${PORTS[@]}"; do
    local pidfile="$DIR/$port/redis.pid"
    if [ -f "$pidfile" ]; then
      local pid; pid=$(cat "$pidfile")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    fi
  done
}

if [ -n "${RELAYMQ_REDIS_CLUSTER_STOP:-}" ]; then
  stop_all
  rm -rf "$DIR"
  exit 0
fi

if cluster_ok; then
  exit 0
fi

start_nodes() {
  for port in "${PORTS[@]}"; do
    ping "$port" && continue
    mkdir -p "$DIR/$port"
    redis-server --port "$port" --bind 127.0.0.1 --dir "$DIR/$port" \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 5000 \
      --appendonly no --save "" --maxmemory-policy noeviction \
      --daemonize yes --pidfile "$DIR/$port/redis.pid" --logfile "$DIR/$port/redis.log"
  done
  for port in "${PORTS[@]}"; do
    for _ in $(seq 200); do ping "$port" && break; sleep 0.05; done
    ping "$port" || { echo "redis-cluster: node $port did not start (log: $DIR/$port/redis.log)" >&2; exit 1; }
  done
}

had_conf=$(find "$DIR" -name nodes.conf 2>/dev/null | wc -l || true)
start_nodes
if [ "$had_conf" != "0" ]; then
  # Nodes restarted from an old nodes.conf re-form the cluster by themselves; give them a moment.
  for _ in $(seq 40); do cluster_ok && exit 0; sleep 0.1; done
fi

known=$(redis-cli -h 127.0.0.1 -p "${PORTS[0]}" cluster info | grep -o 'cluster_known_nodes:[0-9]*' | cut -d: -f2)
if [ "${known:-1}" != "1" ]; then
  # A half-formed cluster from an earlier run: start again from nothing (it holds test data only).
  stop_all
  rm -rf "$DIR"
  start_nodes
fi

args=()
for port in "${PORTS[@]}"; do args+=("127.0.0.1:$port"); done
redis-cli --cluster create "${args[@]}" --cluster-replicas 0 --cluster-yes >"$DIR/create.log" 2>&1 \
  || { cat "$DIR/create.log" >&2; exit 1; }
for _ in $(seq 200); do cluster_ok && break; sleep 0.05; done
cluster_ok || { echo "redis-cluster: cluster did not reach cluster_state:ok" >&2; exit 1; }
echo "redis-cluster: 3 masters on 127.0.0.1:${PORTS[*]}"

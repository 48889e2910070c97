#!/usr/bin/env bash
# A cluster on this machine, to try it: three etcd members, three writers sharing one data root
# (each owning a share of the shards through its etcd lease) and a reader. Needs `etcd` (Debian:
# apt-get install -y etcd-server). Sets up .venv like serve.sh. Ctrl-C (or SIGTERM) stops it
# cleanly: the writers drain (finish in-flight batches, release their shards, leave), then the
# reader and etcd stop. A writer killed meanwhile stays down; its shards move to the others once
# its lease expires (`rollout cluster status`).
#
#   bash deploy/local/cluster.sh [--dir DIR] [--cluster NAME] [--lease-ttl SECONDS]
#        [--writer-ports P,P,P] [--reader-port P] [--etcd-ports P,P,P] [--etcd-peer-ports P,P,P]
#        [-- EXTRA serve-writer OPTIONS]
#
# DIR (default ./rollout-cluster) holds data/ (the data root), etcd/ (the members' data) and
# logs/. Running it again on the same DIR and ports restarts the same cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."

dir=rollout-cluster
cluster=local
lease_ttl=10
writer_ports=50061,50062,50063
reader_port=50052
etcd_ports=2379,22379,32379
etcd_peer_ports=2380,22380,32380
writer_extra=()
usage() { sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir="$2"; shift 2 ;;
    --cluster) cluster="$2"; shift 2 ;;
    --lease-ttl) lease_ttl="$2"; shift 2 ;;
    --writer-ports) writer_ports="$2"; shift 2 ;;
    --reader-port) reader_port="$2"; shift 2 ;;
    --etcd-ports) etcd_ports="$2"; shift 2 ;;
    --etcd-peer-ports) etcd_peer_ports="$2"; shift 2 ;;
    --) shift; writer_extra=("$@"); break ;;
    -h|--help) usage ;;
    *) echo "unknown option $1" >&2; usage ;;
  esac
done
IFS=, read -r -a writer_port <<< "$writer_ports"
IFS=, read -r -a etcd_port <<< "$etcd_ports"
IFS=, read -r -a etcd_peer_port <<< "$etcd_peer_ports"
if [ "${#etcd_port[@]}" != "${#etcd_peer_port[@]}" ]; then
  echo "--etcd-ports and --etcd-peer-ports must name as many ports" >&2
  exit 2
fi
etcd_binary="$(command -v etcd || true)"
if [ -z "$etcd_binary" ]; then
  echo "etcd is not installed: apt-get install -y etcd-server" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# Install with the cluster extra (the etcd client) when it is missing, or update it when the
# dependencies changed since this script installed them.
if [ ! -x .venv/bin/rollout ] || ! .venv/bin/python -c "import aetcd" 2> /dev/null \
  || { [ -f .venv/.rollout-cluster-installed ] && [ pyproject.toml -nt .venv/.rollout-cluster-installed ]; }; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[cluster]"
  touch .venv/.rollout-cluster-installed
fi

mkdir -p "$dir/data" "$dir/etcd" "$dir/logs"
dir="$(cd "$dir" && pwd)"
# Each process gets its own process group (Ctrl-C reaches this script alone, which stops them in
# order) and is killed by the kernel if this script dies without stopping it (setpriv).
# Called as `run COMMAND &`: exec keeps the process id the script waits for and signals.
run() {
  if command -v setpriv > /dev/null; then
    exec setsid setpriv --pdeathsig KILL -- "$@"
  else
    exec setsid "$@"
  fi
}

pids=()   # every process started, in start order
names=()  # its name, same index
stopping=0
stop_all() {
  trap '' INT TERM
  stopping=1
  echo "stopping: writers drain, then the reader and etcd" >&2
  for kind in writer reader etcd; do
    local waiting=()
    for i in "${!pids[@]}"; do
      if [[ "${names[$i]}" == "$kind"* ]] && kill -0 "${pids[$i]}" 2> /dev/null; then
        kill -TERM "${pids[$i]}" 2> /dev/null || true
        waiting+=("${pids[$i]}")
      fi
    done
    for i in "${!pids[@]}"; do
      [[ " ${waiting[*]-} " == *" ${pids[$i]} "* ]] || continue
      local pid="${pids[$i]}" code=0
      for _ in $(seq 300); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
      kill -KILL "$pid" 2> /dev/null || true
      wait "$pid" 2> /dev/null || code=$?
      echo "  ${names[$i]} (pid $pid) stopped with status $code" >&2
    done
  done
  echo "stopped" >&2
}
trap 'stop_all; exit 0' INT TERM
trap '[ "$stopping" = 1 ] || stop_all' EXIT

initial=""
endpoints=""
for i in "${!etcd_port[@]}"; do
  initial="${initial:+$initial,}m$i=http://127.0.0.1:${etcd_peer_port[$i]}"
  endpoints="${endpoints:+$endpoints,}127.0.0.1:${etcd_port[$i]}"
done
for i in "${!etcd_port[@]}"; do
  run "$etcd_binary" --name "m$i" --data-dir "$dir/etcd/m$i" \
    --listen-client-urls "http://127.0.0.1:${etcd_port[$i]}" \
    --advertise-client-urls "http://127.0.0.1:${etcd_port[$i]}" \
    --listen-peer-urls "http://127.0.0.1:${etcd_peer_port[$i]}" \
    --initial-advertise-peer-urls "http://127.0.0.1:${etcd_peer_port[$i]}" \
    --initial-cluster "$initial" --initial-cluster-token "rollout-$cluster" \
    --initial-cluster-state new --logger zap --log-outputs stderr \
    < /dev/null > "$dir/logs/etcd-m$i.log" 2>&1 &
  pids+=("$!"); names+=("etcd m$i")
done

# Waits until every etcd member answers /health with a leader (at most 60 s).
.venv/bin/python - "$endpoints" << 'EOF'
import json, sys, time, urllib.request
give_up = time.monotonic() + 60
for endpoint in sys.argv[1].split(","):
    while True:
        try:
            with urllib.request.urlopen(f"http://{endpoint}/health", timeout=2) as reply:
                if json.load(reply).get("health") == "true":
                    break
        except (OSError, ValueError):
            pass
        if time.monotonic() > give_up:
            sys.exit(f"etcd member {endpoint} is not healthy after 60 s (see the logs)")
        time.sleep(0.2)
EOF

# Starts a service and waits for its "listening on" line (at most 120 s: a data root to index).
start_service() {
  local name="$1" log="$2"
  shift 2
  run .venv/bin/rollout "$@" < /dev/null > "$log" 2>&1 &
  pids+=("$!"); names+=("$name")
  local pid="$!"
  for _ in $(seq 1200); do
    if grep -q "listening on" "$log"; then return 0; fi
    if ! kill -0 "$pid" 2> /dev/null; then
      echo "$name did not start:" >&2
      tail -n 20 "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "$name did not start within 120 s (see $log)" >&2
  exit 1
}

writers=""
for i in "${!writer_port[@]}"; do
  address="127.0.0.1:${writer_port[$i]}"
  start_service "writer $address" "$dir/logs/writer-$((i + 1)).log" serve-writer \
    --data-dir "$dir/data" --address "$address" --etcd "$endpoints" --cluster "$cluster" \
    --lease-ttl "$lease_ttl" ${writer_extra[@]+"${writer_extra[@]}"}
  writers="${writers:+$writers,}$address"
done
start_service "reader 127.0.0.1:$reader_port" "$dir/logs/reader.log" serve-reader \
  --data-dir "$dir/data" --address "127.0.0.1:$reader_port" --search-index-dir "$dir/search-index" \
  --writers "$writers"

echo "cluster $cluster is up (data root $dir/data, logs in $dir/logs):"
for i in "${!pids[@]}"; do
  echo "  ${names[$i]}: pid ${pids[$i]}"
done
cat << EOF
In another terminal:
  export ROLLOUT_WRITER=$writers ROLLOUT_READER=127.0.0.1:$reader_port
  .venv/bin/rollout cluster status --etcd $endpoints --cluster $cluster
  kill -9 PID     # a writer: its shards move once its lease ($lease_ttl s) expires
  .venv/bin/rollout cluster drain ADDRESS --etcd $endpoints --cluster $cluster
Ctrl-C here stops the cluster.
ready
EOF

# Reports each process that exits; returns when every writer is gone (then stops the rest).
while true; do
  set +e
  wait -n -p exited
  code=$?
  set -e
  if [ -z "${exited:-}" ]; then break; fi
  for i in "${!pids[@]}"; do
    if [ "${pids[$i]}" = "$exited" ]; then echo "${names[$i]} (pid $exited) exited with status $code" >&2; fi
  done
  exited=""
  alive=0
  for i in "${!pids[@]}"; do
    if [[ "${names[$i]}" == writer* ]] && kill -0 "${pids[$i]}" 2> /dev/null; then alive=1; fi
  done
  if [ "$alive" = 0 ]; then
    echo "no writer is left" >&2
    break
  fi
done

#!/usr/bin/env bash
# Runs `reverie bench` against a local `reverie serve`, 10 s per mode
# (insert, sample, mixed) at 400 B and 40 kB payloads, 4 clients, and
# prints one JSON line per run. The server listens on loopback only; the
# table is the default one, with max_size bounded so 40 kB items fit in
# memory.
#
#   bench/bench-reverie.sh [DURATION] [CLIENTS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
duration=${1:-10s}
clients=${2:-4}
go build -o .bin/reverie ./cmd/reverie
cfg=$(mktemp --suffix=.yaml)
log=$(mktemp)
trap 'kill $pid 2>/dev/null || true; rm -f "$cfg" "$log"' EXIT
source scripts/serving.sh
for payload in 400 40000; do
  max_size=$(( payload > 1000 ? 20000 : 1000000 ))
  cat >"$cfg" <<YAML
tables:
  - name: replay
    sampler: uniform
    remover: fifo
    max_size: $max_size
    rate_limiter: {min_size: 1}
YAML
  .bin/reverie serve --config "$cfg" --listen localhost:0 2>"$log" &
  pid=$!
  port=$(reverie_addr "$log" $pid) || exit 1
  port=${port##*:}
  for mode in insert sample mixed; do
    .bin/reverie bench --addr "127.0.0.1:$port" --table replay --mode "$mode" \
      --payload "$payload" --clients "$clients" --duration "$duration" --json
  done
  kill -TERM $pid
  wait $pid || true
done

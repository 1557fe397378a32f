#!/usr/bin/env bash
# What TLS costs reverie's server: two `reverie serve` on one table config,
# one plaintext and one with TLS (the test certificates in testdata/tls),
# driven in turn by `reverie bench` with 8 clients, the order alternating
# between rounds. Both tables are filled first.
#
#   bench/tls-ab.sh PAYLOAD MAX_SIZE MODE [ROUNDS]
#
# e.g. bench/tls-ab.sh 40000 25000 sample 3. Prints items/s and the
# server's CPU per item (utime + stime from /proc/PID/stat) of each run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
payload=${1:?PAYLOAD} max=${2:?MAX_SIZE} mode=${3:?MODE} rounds=${4:-3}
go build -o .bin/reverie ./cmd/reverie
dir=$(mktemp -d)
certs=testdata/tls
cat >"$dir/cfg.yaml" <<Y
tables:
  - {name: t, sampler: uniform, remover: fifo, max_size: $max, rate_limiter: {min_size: 1}}
Y
.bin/reverie serve --config "$dir/cfg.yaml" --listen 127.0.0.1:0 2>"$dir/plain.log" &
p1=$!
.bin/reverie serve --config "$dir/cfg.yaml" --listen 127.0.0.1:0 \
  --tls-cert $certs/server.pem --tls-key $certs/server.key 2>"$dir/tls.log" &
p2=$!
trap 'kill $p1 $p2 2>/dev/null; rm -rf "$dir"' EXIT
source scripts/serving.sh
declare -A pid=([plain]=$p1 [tls]=$p2) addr
addr[plain]=$(reverie_addr "$dir/plain.log" $p1) || exit 1
addr[tls]=$(reverie_addr "$dir/tls.log" $p2) || exit 1
declare -A flags=([plain]="" [tls]="--tls-ca $certs/ca.pem")
for s in plain tls; do
  # shellcheck disable=SC2086 # flags are words
  .bin/reverie bench --addr "${addr[$s]}" ${flags[$s]} --table t --mode insert --payload "$payload" \
    --clients 4 --items $((max + max / 10)) >/dev/null
done
tick=$(getconf CLK_TCK)
for r in $(seq "$rounds"); do
  order="plain tls"
  ((r % 2 == 0)) && order="tls plain"
  for s in $order; do
    c0=$(awk '{print $14+$15}' "/proc/${pid[$s]}/stat")
    # shellcheck disable=SC2086
    .bin/reverie bench --addr "${addr[$s]}" ${flags[$s]} --table t --mode "$mode" --payload "$payload" \
      --clients 8 --duration 3s --json >"$dir/out.json"
    c1=$(awk '{print $14+$15}' "/proc/${pid[$s]}/stat")
    python3 - "$dir/out.json" "$mode" "$r" "$s" "$((c1 - c0))" "$tick" <<'PY'
import json, sys
f, mode, r, s, ticks, tick = sys.argv[1:]
k = json.load(open(f))[mode]
print(f'round {r} {s:5s} {k["items_per_sec"]:9.0f} items/s  server {int(ticks) / int(tick) * 1e6 / max(k["items"], 1):6.2f} us/item', flush=True)
PY
  done
done

#!/usr/bin/env bash
# A/B comparison of two reverie binaries under one `reverie bench` workload.
# On a shared machine absolute figures drift from minute to minute, so the
# two binaries run alternately (A B, B A, A B, ...) and the script reports
# each round's ratios B/A, measured minutes apart at most:
#
#   bench/ab.sh OLD_BINARY NEW_BINARY MODE PAYLOAD [ROUNDS] [SECONDS] [serve flags...]
#
#   MODE: insert | sample (section 5 table: uniform, FIFO, MinSize(1); sample
#         first inserts 20,000 items with 4 clients, outside the measurement)
#
# Both servers are driven by NEW_BINARY's `reverie bench` with $CLIENTS clients (default 8),
# plus any flags in $BENCH_FLAGS (for example "--in-flight 256", or
# "--tls-ca testdata/tls/ca.pem" against serve flags that turn on TLS). Sample
# runs first insert $PREFILL items (default 20,000) with 4 clients.
# Server CPU is read from /proc/PID/stat around the measured run only.
# Prints one line per run and, per round, items/s and CPU per item as B/A.
# In the serve flags, @DIR@ stands for a fresh empty directory per run
# (for example --checkpoint-dir @DIR@ --wal-fsync never), so that no run
# restores what the one before it wrote.
set -euo pipefail
old=$1 new=$2 mode=$3 payload=$4 rounds=${5:-3} secs=${6:-10}
shift $(( $# < 6 ? $# : 6 ))
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
max=$(( payload > 1000 ? 1000000000 / payload : 1000000 ))
echo "{\"tables\": [{\"name\": \"t\", \"sampler\": \"uniform\", \"remover\": \"fifo\", \"max_size\": $max, \"rate_limiter\": {\"min_size\": 1}}]}" >"$dir/cfg.yaml"
tick=$(getconf CLK_TCK)
source "$(dirname "$0")/../scripts/serving.sh"

# run BINARY: prints "items_per_sec cpu_us_per_item"
run() {
  local bin=$1 port pid run_dir; shift
  port=$(( 20000 + RANDOM % 20000 ))
  run_dir=$(mktemp -d "$dir/run.XXXX")
  "$bin" serve --config "$dir/cfg.yaml" --listen "localhost:$port" "${@//@DIR@/$run_dir}" >"$dir/serve.log" 2>&1 &
  pid=$!
  # Wait until it serves: many clients connecting at once to a server
  # still starting can run out their dial timeout in reconnect backoff.
  reverie_addr "$dir/serve.log" $pid >/dev/null || exit 1
  [[ $mode == sample ]] && "$new" bench --addr "localhost:$port" --table t --mode insert --payload "$payload" --clients 4 --items "${PREFILL:-20000}" ${BENCH_FLAGS:-} >/dev/null
  local c0 c1
  c0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  "$new" bench --addr "localhost:$port" --table t --mode "$mode" --payload "$payload" --clients "${CLIENTS:-8}" --duration "${secs}s" --json ${BENCH_FLAGS:-} >"$dir/out.json"
  c1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  kill -TERM "$pid"; wait "$pid" || true
  rm -rf "$run_dir"
  python3 - "$dir/out.json" "$mode" "$(( c1 - c0 ))" "$tick" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))[sys.argv[2]]
cpu = int(sys.argv[3]) / int(sys.argv[4])
print(f"{r['items_per_sec']:.0f} {1e6 * cpu / max(r['items'], 1):.2f}")
EOF
}

for i in $(seq "$rounds"); do
  if (( i % 2 )); then
    a=$(run "$old" "$@"); b=$(run "$new" "$@")
  else
    b=$(run "$new" "$@"); a=$(run "$old" "$@")
  fi
  read -r ai ac <<<"$a"; read -r bi bc <<<"$b"
  printf '%s %s round %d: old %s items/s %s us/item, new %s items/s %s us/item; items/s new/old %.2f, cpu/item new/old %.2f\n' \
    "$mode" "$payload" "$i" "$ai" "$ac" "$bi" "$bc" "$(echo "$bi / $ai" | bc -l)" "$(echo "$bc / $ac" | bc -l)"
done

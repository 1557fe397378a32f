#!/usr/bin/env bash
# A/B comparison of two builds of reverie's Go client (their `reverie
# bench`) against one server, for changes on the client side such as the
# writer's request size. bench/ab.sh compares server builds instead.
#
#   bench/client-ab.sh OLD_BINARY NEW_BINARY PAYLOAD [CLIENTS] [ROUNDS] [SECONDS]
#
# NEW_BINARY serves the section-5 table (uniform, FIFO, MinSize(1), about
# 1 GB of payload), which NEW_BINARY first fills past max_size with 4
# writers, outside the measurement, so that every measured run evicts as
# it inserts. Then each round runs `reverie bench --mode insert` from both
# binaries, alternating which goes first, with CLIENTS writers (default 8)
# for SECONDS (default 3). Server CPU is read from /proc/PID/stat around
# each measured run. Prints one line per round: items/s, server CPU per
# item and p99 latency of each, and the ratios new/old.
set -euo pipefail
old=$1 new=$2 payload=$3 clients=${4:-8} rounds=${5:-3} secs=${6:-3}
dir=$(mktemp -d)
pid=
trap '[[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
max=$(( payload > 1000 ? 1000000000 / payload : 1000000 ))
echo "{\"tables\": [{\"name\": \"t\", \"sampler\": \"uniform\", \"remover\": \"fifo\", \"max_size\": $max, \"rate_limiter\": {\"min_size\": 1}}]}" >"$dir/cfg.yaml"
tick=$(getconf CLK_TCK)
port=$(( 20000 + RANDOM % 20000 ))
"$new" serve --config "$dir/cfg.yaml" --listen "localhost:$port" >"$dir/serve.log" 2>&1 &
pid=$!
"$new" bench --addr "localhost:$port" --table t --mode insert --payload "$payload" --clients 4 --items $(( max + max / 5 )) >/dev/null

# run BINARY: prints "items_per_sec cpu_us_per_item p99_ms"
run() {
  local c0 c1
  c0=$(awk '{print $14+$15}' "/proc/$pid/stat")
  "$1" bench --addr "localhost:$port" --table t --mode insert --payload "$payload" --clients "$clients" --duration "${secs}s" --json >"$dir/out.json"
  c1=$(awk '{print $14+$15}' "/proc/$pid/stat")
  python3 - "$dir/out.json" "$(( c1 - c0 ))" "$tick" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))['insert']
cpu = int(sys.argv[2]) / int(sys.argv[3])
print(f"{r['items_per_sec']:.0f} {1e6 * cpu / max(r['items'], 1):.1f} {r['p99_ms']:.1f}")
EOF
}

for i in $(seq "$rounds"); do
  if (( i % 2 )); then
    a=$(run "$old"); b=$(run "$new")
  else
    b=$(run "$new"); a=$(run "$old")
  fi
  read -r ai ac ap <<<"$a"; read -r bi bc bp <<<"$b"
  printf '%s B x%s round %d: old %s items/s %s us/item p99 %s ms; new %s items/s %s us/item p99 %s ms; items/s new/old %.2f, cpu/item new/old %.2f\n' \
    "$payload" "$clients" "$i" "$ai" "$ac" "$ap" "$bi" "$bc" "$bp" "$(echo "$bi / $ai" | bc -l)" "$(echo "$bc / $ac" | bc -l)"
done

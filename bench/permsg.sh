#!/usr/bin/env bash
# One request per item, reverie and Reverb side by side: bench/permsg (the
# request pattern of dm-reverb's writer when it batches nothing, from a Go
# client cheap enough not to be the limit) against both servers on the
# section-5 400 B table, in alternating runs.
#
#   bench/permsg.sh [SECONDS] [ROUNDS] [RATE] [permsg flags...]
#
# SECONDS per run (default 3); ROUNDS (default 3), each one run per server
# per load, the order alternating; RATE, the paced load in items/s
# (default 20000, which both servers sustain here). Each round runs
# unpaced (as fast as confirmations allow: throughput) and paced at RATE
# (the same work for both: CPU per item and latency). 8 writers on one
# connection, 48 items in flight each, unless the flags say otherwise.
#
# Prints one line per run, with the server's CPU per item (utime+stime from
# /proc/PID/stat around the run), and the per-round ratios reverie / Reverb.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source bench/both-servers.sh

if [[ ${1:-} == __inner ]]; then
  shift
  py=$1 dir=$2 secs=$3 rounds=$4 rate=$5
  shift 5
  start_both_servers permsg "$py" "$dir"
  for r in $(seq "$rounds"); do
    for load in 0 "$rate"; do
      for s in $(round_order "$r"); do
        .bin/bench/permsg --addr "${addr[$s]}" --table s5_400 --payload 400 --duration "${secs}s" \
          --rate "$load" --server-pid "${pid[$s]}" --json "$@" >"$dir/out.json"
        python3 - "$dir" "$s" "$r" "$load" <<'EOF'
import json, sys
d, server, rnd, load = sys.argv[1:]
r = json.load(open(f'{d}/out.json'))
what = 'unpaced' if float(load) == 0 else f'at {float(load):.0f}/s'
print(f'round {rnd} {what:11s} {server:7s} {r["items_per_sec"]:8.0f} items/s'
      f'  server {r["server_cpu_us_per_item"]:6.2f} us/item'
      f'  p50 {r["p50_ms"]:.2f} ms  p99 {r["p99_ms"]:.2f} ms', flush=True)
with open(f'{d}/runs', 'a') as f:
  f.write(f'{rnd} {load} {server} {r["items_per_sec"]} {r["server_cpu_us_per_item"]} {r["p99_ms"]}\n')
EOF
      done
    done
  done
  python3 - "$dir/runs" <<'EOF'
import collections, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
  rnd, load, server, ips, cpu, p99 = line.split()
  runs[(int(rnd), float(load))][server] = (float(ips), float(cpu), float(p99))
for (rnd, load), s in sorted(runs.items()):
  v, b = s['reverie'], s['reverb']
  what = 'unpaced' if load == 0 else f'at {load:.0f}/s'
  print(f'round {rnd} {what}: reverie/Reverb items/s {v[0] / b[0]:.2f}x,'
        f' server CPU per item {v[1] / b[1]:.2f}x, p99 {v[2]:.2f} vs {b[2]:.2f} ms')
EOF
  exit 0
fi

secs=${1:-3} rounds=${2:-3} rate=${3:-20000}
shift $(($# < 3 ? $# : 3))
mkdir -p .bin/bench
go build -o .bin/bench/permsg ./bench/permsg
outer_stage permsg '{"tables": [{"name": "s5_400", "sampler": "uniform", "remover": "fifo", "max_size": 1000000, "rate_limiter": {"min_size": 1}}]}' "$secs" "$rounds" "$rate" "$@"

#!/usr/bin/env bash
# Steady state with a full table: reverie and Reverb side by side on the
# section-5 400 B table (uniform sampler, FIFO remover, MinSize(1),
# max_size 1M), each first filled past capacity, then measured in
# alternating runs. `make bench`'s runs are 1 s on tables that earlier runs
# filled; here every measured insert evicts, and the runs are long enough
# for the Go collector to run inside them.
#
#   bench/steady.sh [MODE] [SECONDS] [ROUNDS] [bench flags...]
#
#   MODE: insert | sample (default insert); SECONDS per run (default 3);
#   ROUNDS (default 4), each one run per server, the order alternating.
#
# Both servers are driven by `reverie bench` with 8 clients. Prints one
# line per run: items/s, the server's CPU per item (utime+stime from
# /proc/PID/stat around the run) and the client's (from /usr/bin/time),
# and the per-round ratios reverie / Reverb.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source bench/both-servers.sh

if [[ ${1:-} == __inner ]]; then
  shift
  py=$1 dir=$2 mode=$3 secs=$4 rounds=$5
  shift 5
  start_both_servers steady "$py" "$dir"
  for s in reverb reverie; do
    .bin/reverie bench --addr "${addr[$s]}" --table s5_400 --mode insert --payload 400 \
      --clients 8 --items 1300000 >/dev/null
  done
  tick=$(getconf CLK_TCK)
  for r in $(seq "$rounds"); do
    for s in $(round_order "$r"); do
      c0=$(awk '{print $14+$15}' "/proc/${pid[$s]}/stat")
      /usr/bin/time -f "%U %S" -o "$dir/time" .bin/reverie bench --addr "${addr[$s]}" \
        --table s5_400 --mode "$mode" --payload 400 --clients 8 --duration "${secs}s" --json "$@" >"$dir/out.json"
      c1=$(awk '{print $14+$15}' "/proc/${pid[$s]}/stat")
      python3 - "$dir" "$mode" "$s" "$r" "$((c1 - c0))" "$tick" <<'EOF'
import json, sys
d, mode, server, rnd, ticks, tick = sys.argv[1:]
r = json.load(open(f'{d}/out.json'))[mode]
user, sys_ = map(float, open(f'{d}/time').read().split()[-2:])
srv = int(ticks) / int(tick) * 1e6 / r['items']
cli = (user + sys_) * 1e6 / r['items']
print(f'round {rnd} {server:7s} {r["items_per_sec"]:9.0f} items/s  server {srv:5.2f} us/item'
      f'  client {cli:5.2f} us/item  p99 {r["p99_ms"]:.2f} ms', flush=True)
with open(f'{d}/runs', 'a') as f:
  f.write(f'{rnd} {server} {r["items_per_sec"]} {srv}\n')
EOF
    done
  done
  round_ratios "$dir/runs" items/s "server CPU per item"
  exit 0
fi

mode=${1:-insert} secs=${2:-3} rounds=${3:-4}
shift $(($# < 3 ? $# : 3))
outer_stage steady '{"tables": [{"name": "s5_400", "sampler": "uniform", "remover": "fifo", "max_size": 1000000, "rate_limiter": {"min_size": 1}}]}' "$mode" "$secs" "$rounds" "$@"

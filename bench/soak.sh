#!/usr/bin/env bash
# A longer mixed load on both servers, to see whether either drifts: its
# memory, its throughput or its CPU per item, round after round, on a table
# that stays full. reverie and Reverb serve the same table (uniform sampler,
# FIFO remover, MinSize(1), max_size min(1M, 10^9 / PAYLOAD), so about 1 GB
# of payload) and take turns, the order alternating between rounds.
#
#   bench/soak.sh [PAYLOAD] [SECONDS] [ROUNDS]
#
# PAYLOAD bytes per item (default 40000); SECONDS per run (default 60);
# ROUNDS (default 8), each one run per server. Each run is `reverie bench
# --mode mixed --clients 8` (4 writers and 4 samplers). Both tables are
# filled past max_size first.
#
# Prints one line per run: inserted and sampled items/s, the server's CPU
# per item (inserted plus sampled; utime+stime from /proc/PID/stat around
# the run), its resident memory at the end of the run and its peak so far
# (VmRSS, VmHWM), its thread count and the client's errors; then, per
# round, reverie's figures over Reverb's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source bench/both-servers.sh

if [[ ${1:-} == __inner ]]; then
  shift
  py=$1 dir=$2 payload=$3 secs=$4 rounds=$5 max=$6
  start_both_servers soak "$py" "$dir"
  fill_both_servers t "$payload" $((max + max / 10))
  tick=$(getconf CLK_TCK)
  for r in $(seq "$rounds"); do
    for s in $(round_order "$r"); do
      p=${pid[$s]}
      c0=$(awk '{print $14+$15}' "/proc/$p/stat")
      .bin/reverie bench --addr "${addr[$s]}" --table t --mode mixed --payload "$payload" \
        --clients 8 --duration "${secs}s" --json >"$dir/out.json"
      c1=$(awk '{print $14+$15}' "/proc/$p/stat")
      python3 - "$dir" "$s" "$r" "$((c1 - c0))" "$tick" "/proc/$p/status" <<'PY'
import json, sys
d, server, rnd, ticks, tick, status = sys.argv[1:]
out = json.load(open(f'{d}/out.json'))
ins, smp = out['insert'], out['sample']
st = dict(l.split(':', 1) for l in open(status) if ':' in l)
kb = lambda k: int(st[k].split()[0])
cpu = int(ticks) / int(tick) * 1e6 / max(ins['items'] + smp['items'], 1)
errs = out.get('errors', 0)
print(f'round {rnd} {server:7s} insert {ins["items_per_sec"]:8.0f}/s  sample {smp["items_per_sec"]:8.0f}/s'
      f'  server {cpu:6.2f} us/item  RSS {kb("VmRSS") / 1024:6.0f} MB  peak {kb("VmHWM") / 1024:6.0f} MB'
      f'  threads {st["Threads"].strip()}  errors {errs}', flush=True)
with open(f'{d}/runs', 'a') as f:
  f.write(f'{rnd} {server} {ins["items_per_sec"]} {smp["items_per_sec"]} {cpu} {kb("VmRSS") / 1024}\n')
PY
    done
  done
  round_ratios "$dir/runs" "insert items/s" "sample items/s" "server CPU per item" RSS
  exit 0
fi

payload=${1:-40000} secs=${2:-60} rounds=${3:-8}
max=$((payload > 1000 ? 1000000000 / payload : 1000000))
outer_stage soak "{\"tables\": [{\"name\": \"t\", \"sampler\": \"uniform\", \"remover\": \"fifo\", \"max_size\": $max, \"rate_limiter\": {\"min_size\": 1}}]}" \
  "$payload" "$secs" "$rounds" "$max"

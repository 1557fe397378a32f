#!/usr/bin/env bash
# Sample latency at one fixed offered load, reverie and Reverb side by
# side: both servers on the section-5 table of PAYLOAD bytes, both filled
# past max_size first, then `bench/paced` (8 clients, requests of 16) at
# RATE samples/s against each in turn, the order alternating, ROUNDS times.
# `make bench` takes one 2 s run per server and configuration and keeps the
# lower p99 of two; this gives the spread behind that figure.
#
#   bench/paced-ab.sh PAYLOAD RATE [SECONDS] [ROUNDS]
#
# Prints one line per run (p50, p99, p999, late requests, how late the
# client's timer woke it (p50/p99, left out of the latency) and the
# server's CPU per sample) and, per round, which server's p99 was the lower.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source bench/both-servers.sh

if [[ ${1:-} == __inner ]]; then
  shift
  py=$1 dir=$2 payload=$3 rate=$4 secs=$5 rounds=$6 max=$7
  start_both_servers paced-ab "$py" "$dir"
  fill_both_servers t "$payload" $((max + max / 10))
  tick=$(getconf CLK_TCK)
  for r in $(seq "$rounds"); do
    for s in $(round_order "$r"); do
      c0=$(awk '{print $14+$15}' "/proc/${pid[$s]}/stat")
      .bin/bench/paced --addr "${addr[$s]}" --table t --rate "$rate" --batch 16 --clients 8 \
        --duration "${secs}s" --json >"$dir/out.json"
      c1=$(awk '{print $14+$15}' "/proc/${pid[$s]}/stat")
      python3 - "$dir" "$s" "$r" "$((c1 - c0))" "$tick" <<'PY'
import json, sys
d, server, rnd, ticks, tick = sys.argv[1:]
rep = json.load(open(f'{d}/out.json'))
r = rep['sample']
cpu = int(ticks) / int(tick) * 1e6 / max(r['items'], 1)
print(f'round {rnd} {server:7s} {r["items_per_sec"]:9.0f} samples/s  p50 {r["p50_ms"]:.2f}  p99 {r["p99_ms"]:.2f}'
      f'  p999 {r["p999_ms"]:.2f} ms  late {rep["late_requests"]}'
      f'  client timer late {rep["client_wake_late_p50_ms"]:.2f}/{rep["client_wake_late_p99_ms"]:.2f} ms'
      f'  server {cpu:.2f} us/sample', flush=True)
with open(f'{d}/runs', 'a') as f:
  f.write(f'{rnd} {server} {r["p99_ms"]}\n')
PY
    done
  done
  python3 - "$dir/runs" <<'PY'
import collections, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
  rnd, server, p99 = line.split()
  runs[rnd][server] = float(p99)
lower = 0
for rnd, s in sorted(runs.items(), key=lambda kv: int(kv[0])):
  v, b = s['reverie'], s['reverb']
  lower += v <= b
  print(f'round {rnd}: p99 reverie {v:.2f} ms, Reverb {b:.2f} ms: {"reverie" if v <= b else "Reverb"} lower')
print(f'reverie p99 no higher in {lower} of {len(runs)} rounds')
PY
  exit 0
fi

payload=${1:?payload bytes} rate=${2:?samples per second} secs=${3:-2} rounds=${4:-6}
mkdir -p .bin/bench
go build -o .bin/bench/paced ./bench/paced
max=$((payload > 1000 ? 1000000000 / payload : 1000000))
outer_stage paced-ab "{\"tables\": [{\"name\": \"t\", \"sampler\": \"uniform\", \"remover\": \"fifo\", \"max_size\": $max, \"rate_limiter\": {\"min_size\": 1}}]}" \
  "$payload" "$rate" "$secs" "$rounds" "$max"

#!/usr/bin/env bash
# The dm-reverb Python client against reverie and Reverb, side by side:
# PROCS processes of bench/reverb_client_driver.py with THREADS clients
# each, all measuring one window (--start-at), against one server and then
# the other, the order alternating between rounds.
#
#   bench/py-ab.sh MODE PAYLOAD PROCS THREADS [SECONDS] [ROUNDS]
#
# MODE: insert | sample, on the section-5 table of PAYLOAD bytes (uniform,
# FIFO, MinSize(1)). `reverie bench` first fills both tables (insert: past
# max_size, so that every measured insert evicts; sample: 20,000 items).
# SECONDS per run (default 3), ROUNDS (default 3).
#
# `make bench` runs every dm-reverb client as a thread of one process, the
# way one Python program would drive several; the client's threads then
# share the interpreter's lock, which is what limits them. Acme runs each
# actor in a process of its own: PROCS > 1 measures that.
#
# Prints one line per run: items/s of all processes together; the client
# CPU per item (all driver processes, from getrusage); the server's CPU per
# item over the longest of the processes' windows (/proc/PID/stat); and,
# per round, the ratios reverie / Reverb.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source bench/both-servers.sh

if [[ ${1:-} == __inner ]]; then
  shift
  py=$1 dir=$2 mode=$3 payload=$4 procs=$5 threads=$6 secs=$7 rounds=$8 max=$9
  start_both_servers py-ab "$py" "$dir"
  # Inserts are measured on full tables, every insert evicting.
  fill=20000
  [[ $mode == insert ]] && fill=$((max + max / 10))
  fill_both_servers "s5_$payload" "$payload" "$fill"
  for r in $(seq "$rounds"); do
    for s in $(round_order "$r"); do
      # Importing TensorFlow takes a few seconds of CPU per process.
      at=$(python3 -c "import time; print(time.time() + 10 + 2.5 * $procs)")
      pids=()
      for i in $(seq "$procs"); do
        "$py" bench/reverb_client_driver.py --table "s5_$payload" --mode "$mode" --payload "$payload" \
          --clients "$threads" --duration "$secs" --addr "${addr[$s]}" --server-pid "${pid[$s]}" \
          --start-at "$at" >"$dir/out.$i.json" 2>"$dir/driver.$i.log" &
        pids+=($!)
      done
      for p in "${pids[@]}"; do
        wait "$p" || { echo "py-ab: a driver failed; its log:" >&2; cat "$dir"/driver.*.log >&2; exit 1; }
      done
      python3 - "$dir" "$procs" "$mode" "$s" "$r" <<'PY'
import json, sys
d, procs, mode, server, rnd = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
reps = [json.load(open(f'{d}/out.{i}.json')) for i in range(1, procs + 1)]
late = max(r['start_late_sec'] for r in reps)
if late > 0.5:
  sys.exit(f'py-ab: a driver reached the start {late:.1f} s late; the windows do not match')
items = sum(r[mode]['items'] for r in reps)
ips = sum(r[mode]['items_per_sec'] for r in reps)
client = sum(r['server']['client_cpu_sec'] for r in reps) * 1e6 / items
srv = max(r['server']['cpu_sec'] for r in reps) * 1e6 / items
print(f'round {rnd} {server:7s} {ips:9.0f} items/s  client {client:5.1f} us/item'
      f'  server {srv:5.2f} us/item', flush=True)
with open(f'{d}/runs', 'a') as f:
  f.write(f'{rnd} {server} {ips} {client} {srv}\n')
PY
    done
  done
  round_ratios "$dir/runs" items/s "client CPU per item" "server CPU per item"
  exit 0
fi

mode=${1:?insert or sample} payload=${2:?payload bytes} procs=${3:?processes} threads=${4:?clients per process}
secs=${5:-3} rounds=${6:-3}
max=$((payload > 1000 ? 1000000000 / payload : 1000000))
outer_stage py-ab "{\"tables\": [{\"name\": \"s5_$payload\", \"sampler\": \"uniform\", \"remover\": \"fifo\", \"max_size\": $max, \"rate_limiter\": {\"min_size\": 1}}]}" \
  "$mode" "$payload" "$procs" "$threads" "$secs" "$rounds" "$max"

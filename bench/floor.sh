#!/usr/bin/env bash
# reverie and Reverb against the floor of a gRPC-Go replay server: bench/echo
# holding as many payloads in memory as the table (`echo serve --rings`),
# which copies each inserted payload into that memory and samples payloads
# from it at random, with no table, index or encoding. All three serve
# full tables of PAYLOAD-byte items (uniform sampler, FIFO remover,
# MinSize(1), max_size min(1M, 10^9 / PAYLOAD)) and take turns with 8
# clients, the order rotating between rounds.
#
#   bench/floor.sh [MODE] [PAYLOAD] [SECONDS] [ROUNDS]
#
# MODE insert | sample (default insert); PAYLOAD bytes (default 40000);
# SECONDS per run (default 3); ROUNDS (default 4). reverie and Reverb are
# driven by `reverie bench`, the echo by `echo load` (the same bytes; the
# echo acknowledges every insert, and answers requests of 16 samples).
#
# Prints one line per run: items/s and the server's CPU per item (utime +
# stime from /proc/PID/stat around the run); then, per round, reverie's CPU
# per item over Reverb's and over the echo's, and the echo's over Reverb's:
# how far under Reverb a server that cost no more than the echo could get.
#
# FLOOR_ECHOES="NAME=FLAGS;..." adds more echoes holding a table to the
# rotation, each started with `echo serve --rings ... FLAGS` (e.g.
# "keep=--keep;keep-rb0=--keep --read-buffer 0"; "raw=--raw", plain TCP with
# no gRPC, the floor of any transport; "h2=--h2", gRPC to the same client
# from an HTTP/2 server of the echo's own); every round then also
# prints each one's CPU per item over the echo's and over Reverb's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
source bench/both-servers.sh

if [[ ${1:-} == __inner ]]; then
  shift
  py=$1 dir=$2 mode=$3 payload=$4 secs=$5 rounds=$6 max=$7
  start_both_servers floor "$py" "$dir"
  echoes=()
  declare -A loadflags
  trap 'kill -TERM $rpid $vpid ${echoes[*]} 2>/dev/null || true' EXIT
  # start_echo NAME [FLAGS...]: an echo holding a table of the run's
  # payloads, started with FLAGS; waits for its port and records it in
  # addr and pid, and in echoes to stop it on exit.
  start_echo() {
    local name=$1 port=
    shift
    .bin/bench/echo serve --listen 127.0.0.1:0 --rings "$payload:$max" "$@" >"$dir/$name.out" 2>"$dir/$name.log" &
    pid[$name]=$!
    # A raw echo (plain TCP) is driven by a raw load.
    loadflags[$name]=
    [[ " $* " == *" --raw "* ]] && loadflags[$name]=--raw
    echoes+=("$!")
    for _ in $(seq 300); do
      port=$(sed -n 's/^port=//p' "$dir/$name.out")
      [[ -n $port ]] && break
      sleep 0.2
    done
    [[ -n $port ]] || { echo "floor: echo $name did not start" >&2; cat "$dir/$name.log" >&2; exit 1; }
    addr[$name]=127.0.0.1:$port
  }
  start_echo echo
  servers=(reverb reverie echo)
  IFS=';' read -ra variants <<<"${FLOOR_ECHOES:-}"
  for v in "${variants[@]}"; do
    name=${v%%=*} flags=${v#*=}
    # shellcheck disable=SC2086 # flags are words
    start_echo "$name" $flags
    servers+=("$name")
    # Fill its ring's slots (a kept payload lands in each).
    # shellcheck disable=SC2086 # empty or one word
    .bin/bench/echo load ${loadflags[$name]} --addr "${addr[$name]}" --mode insert --payload "$payload" --clients 4 \
      --duration "$(((max * payload) / 400000000 + 2))s" >/dev/null
  done
  fill_both_servers t "$payload" $((max + max / 10))
  tick=$(getconf CLK_TCK)
  for r in $(seq "$rounds"); do
    for s in $(round_order "$r" "${servers[@]}"); do
      c0=$(awk '{print $14+$15}' "/proc/${pid[$s]}/stat")
      if [[ $s != reverb && $s != reverie ]]; then
        # shellcheck disable=SC2086 # empty or one word
        .bin/bench/echo load ${loadflags[$s]} --addr "${addr[$s]}" --mode "$mode" --payload "$payload" \
          --clients 8 --duration "${secs}s" --json >"$dir/out.json"
      else
        .bin/reverie bench --addr "${addr[$s]}" --table t --mode "$mode" --payload "$payload" \
          --clients 8 --duration "${secs}s" --json >"$dir/out.json"
      fi
      c1=$(awk '{print $14+$15}' "/proc/${pid[$s]}/stat")
      python3 - "$dir" "$mode" "$s" "$r" "$((c1 - c0))" "$tick" <<'PY'
import json, sys
d, mode, server, rnd, ticks, tick = sys.argv[1:]
r = json.load(open(f'{d}/out.json'))[mode]
cpu = int(ticks) / int(tick) * 1e6 / max(r['items'], 1)
print(f'round {rnd} {server:7s} {r["items_per_sec"]:9.0f} items/s  server {cpu:6.2f} us/item', flush=True)
with open(f'{d}/runs', 'a') as f:
  f.write(f'{rnd} {server} {r["items_per_sec"]} {cpu}\n')
PY
    done
  done
  python3 - "$dir/runs" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
  rnd, server, items, cpu = line.split()
  runs[int(rnd)][server] = float(cpu)
cols = collections.defaultdict(list)
for rnd, s in sorted(runs.items()):
  v, b, e = s['reverie'], s['reverb'], s['echo']
  ratios = {'reverie/Reverb': v / b, 'reverie/echo': v / e, 'echo/Reverb': e / b}
  for name in sorted(set(s) - {'reverie', 'reverb', 'echo'}):
    ratios[f'{name}/echo'] = s[name] / e
    ratios[f'{name}/Reverb'] = s[name] / b
  for name, x in ratios.items():
    cols[name].append(x)
  print(f'round {rnd}: server CPU per item, ' + ', '.join(f'{k} {x:.2f}x' for k, x in ratios.items()))
print('medians: ' + ', '.join(f'{k} {statistics.median(x):.2f}x' for k, x in cols.items()))
PY
  exit 0
fi

mode=${1:-insert} payload=${2:-40000} secs=${3:-3} rounds=${4:-4}
max=$((payload > 1000 ? 1000000000 / payload : 1000000))
mkdir -p .bin/bench
go build -o .bin/bench/echo ./bench/echo
outer_stage floor "{\"tables\": [{\"name\": \"t\", \"sampler\": \"uniform\", \"remover\": \"fifo\", \"max_size\": $max, \"rate_limiter\": {\"min_size\": 1}}]}" \
  "$mode" "$payload" "$secs" "$rounds" "$max"

#!/usr/bin/env bash
# CPU profile of reverie's server under one workload of bench/, for finding
# where a missed target goes. `reverie serve` has no pprof endpoint, so the
# server is bench/profserve (the same embedded server, profiled from start
# to stop), on loopback; the client is the one bench/run.py uses.
#
#   bench/profile.sh MODE PAYLOAD CLIENTS SECONDS [go|py]
#
#   MODE: insert | sample   (section 5 table: uniform, FIFO, MinSize(1))
#         queue             (Queue(1000) table, producers and consumers)
#         prioritized       (PAYLOAD ignored; CLIENTS writers insert
#                            SECONDS*40000 items, then 1 learner samples)
#
# Prints the top functions (flat and cumulative) and leaves the CPU, heap,
# block and mutex profiles and the binary in .bin/bench/profiles/ for
# `go tool pprof` (block/mutex profiling itself costs a little CPU).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mode=$1 payload=$2 clients=$3 secs=$4 client=${5:-go}
out=.bin/bench/profiles
mkdir -p "$out"
go build -o .bin/reverie ./cmd/reverie
go build -o .bin/bench/profserve ./bench/profserve
go build -o .bin/bench/prioritized ./bench/prioritized
name="$mode-$payload-$clients-$client"
cfg="$out/$name.yaml"
case $mode in
  insert|sample) table=s5_$payload
    max=$(( payload > 1000 ? 1000000000 / payload : 1000000 ))
    echo "{\"tables\": [{\"name\": \"$table\", \"sampler\": \"uniform\", \"remover\": \"fifo\", \"max_size\": $max, \"rate_limiter\": {\"min_size\": 1}}]}" >"$cfg" ;;
  queue) table=queue
    echo '{"tables": [{"name": "queue", "queue": 1000}]}' >"$cfg" ;;
  prioritized) table=prioritized
    echo '{"tables": [{"name": "prioritized", "sampler": {"prioritized": {"priority_exponent": 0.6}}, "remover": "fifo", "max_size": 1000000, "rate_limiter": {"min_size": 1}}]}' >"$cfg" ;;
  *) echo "profile.sh: unknown mode $mode" >&2; exit 2 ;;
esac
prof="$out/$name.prof"
.bin/bench/profserve --config "$cfg" --cpuprofile "$prof" --memprofile "$out/$name.heap.prof" \
  --blockprofile "$out/$name.block.prof" --mutexprofile "$out/$name.mutex.prof" >"$out/$name.port" 2>"$out/$name.log" &
spid=$!
trap 'kill -TERM $spid 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q port= "$out/$name.port" && break; sleep 0.05; done
addr=127.0.0.1:$(sed -n 's/port=//p' "$out/$name.port")
case $mode/$client in
  insert/go|sample/go)
    [[ $mode == sample ]] && .bin/reverie bench --addr "$addr" --table "$table" --mode insert --payload "$payload" --clients 4 --items 20000 >/dev/null
    .bin/reverie bench --addr "$addr" --table "$table" --mode "$mode" --payload "$payload" --clients "$clients" --duration "${secs}s" ;;
  queue/go)
    .bin/reverie bench --addr "$addr" --table queue --mode mixed --payload "$payload" --clients "$clients" --items $((secs * 8000)) ;;
  insert/py|sample/py|queue/py)
    py=$(scripts/reverb-env.sh)
    m=$mode; [[ $mode == queue ]] && m=mixed
    "$py" bench/reverb_client_driver.py --addr "$addr" --table "$table" --mode "$m" --payload "$payload" --clients "$clients" --duration "$secs" 2>/dev/null ;;
  prioritized/*)
    .bin/bench/prioritized --phase insert --addr "$addr" --items $((secs * 40000)) --writers "$clients"
    .bin/bench/prioritized --phase sample --addr "$addr" --duration "${secs}s" ;;
  *) echo "profile.sh: no $client client for $mode" >&2; exit 2 ;;
esac
kill -TERM $spid
wait $spid || true
trap - EXIT
echo
echo "== $name: top by flat CPU (profile: $prof)"
go tool pprof -top -nodecount=30 .bin/bench/profserve "$prof" 2>/dev/null | sed -n '1,40p'
echo
echo "== $name: top by cumulative CPU"
go tool pprof -top -cum -nodecount=45 .bin/bench/profserve "$prof" 2>/dev/null | sed -n '6,55p'

#!/usr/bin/env bash
# Connection churn against one reverie server (bench/churn): workers dial,
# write, sample, cancel and hang up at random for SECONDS, with payloads of
# 400 B to 400 kB, and every sampled payload is checked against the hash it
# carries. The server runs on loopback with its metrics on, so that churn
# can check that its goroutines come back down once the clients are gone.
#
#   bench/churn.sh [SECONDS] [WORKERS] [serve flags...]
#
# SECONDS defaults to 60 and WORKERS to 16. Serve flags go to `reverie
# serve`, for example `--transport own`. With CHURN_TLS=1 the server
# serves TLS with the test certificates in testdata/tls, and the workers
# connect with TLS. The table is uniform with a FIFO
# remover and max_size 2000 (a few hundred MB of mixed payloads). Exits
# non-zero if churn found a damaged payload, an error it did not cause, or
# goroutines left behind.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
secs=${1:-60} workers=${2:-16}
shift $(( $# < 2 ? $# : 2 ))
go build -o .bin/reverie ./cmd/reverie
go build -o .bin/bench/churn ./bench/churn
dir=$(mktemp -d)
echo '{"tables": [{"name": "t", "sampler": "uniform", "remover": "fifo", "max_size": 2000, "rate_limiter": {"min_size": 1}}]}' >"$dir/cfg.yaml"
mport=$(( 20000 + RANDOM % 20000 ))
serve_tls=() churn_tls=()
if [[ ${CHURN_TLS:-} == 1 ]]; then
  serve_tls=(--tls-cert testdata/tls/server.pem --tls-key testdata/tls/server.key)
  churn_tls=(--tls-ca testdata/tls/ca.pem)
fi
.bin/reverie serve --config "$dir/cfg.yaml" --listen 127.0.0.1:0 --metrics "127.0.0.1:$mport" "${serve_tls[@]}" "$@" 2>"$dir/serve.log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
source scripts/serving.sh
port=$(reverie_addr "$dir/serve.log" $pid) || exit 1
port=${port##*:}
.bin/bench/churn --addr "127.0.0.1:$port" --table t --duration "${secs}s" --workers "$workers" \
  --metrics "http://127.0.0.1:$mport/metrics" --server-pid "$pid" --report "$(( secs < 300 ? 10 : 60 ))s" "${churn_tls[@]}"
if grep -q -i "panic" "$dir/serve.log"; then
  echo "churn.sh: the server's log mentions a panic:" >&2
  grep -i -A20 "panic" "$dir/serve.log" >&2
  exit 1
fi

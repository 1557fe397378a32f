#!/usr/bin/env bash
# The core server's acceptance check, as a user would run it: serve the
# Reverb README's reverb_server example and ask ServerInfo through gRPC
# server reflection with grpcurl. Installs a pinned grpcurl into .bin/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p .bin
GOBIN="$root/.bin" go install github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3
go build -o .bin/reverie ./cmd/reverie

log=$(mktemp)
.bin/reverie serve --config examples/config/reverb_server.textproto --listen localhost:0 2>"$log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
source scripts/serving.sh
port=$(reverie_addr "$log" $pid) || exit 1
port=${port##*:}

out=$(.bin/grpcurl -plaintext "localhost:$port" deepmind.reverb.ReverbService/ServerInfo)
echo "$out"
for want in '"name": "my_table"' '"fifo": true' '"maxSize": "200"' '"maxTimesSampled": 5' \
  '"samplesPerInsert": 1' '"minDiff": -1.7976931348623157e+308' '"maxDiff": 1.7976931348623157e+308' '"minSizeToSample": "1"'; do
  grep -qF -- "$want" <<<"$out" || { echo "grpcurl-check: ServerInfo lacks $want" >&2; exit 1; }
done
kill -TERM $pid
wait $pid
echo "grpcurl-check: ok"

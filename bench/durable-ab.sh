#!/usr/bin/env bash
# The cost of durable mode: reverie bench (8 clients) against reverie serve
# with no log and with each fsync policy, insert-only then sample-only, at
# 400 B and 40 kB. Policies alternate within each round, and every run gets
# a fresh server and data directory, so the ratios to "none" compare runs
# made minutes apart on the same machine. Prints one line per run and a
# summary of medians and ratios.
#
#   bench/durable-ab.sh [ROUNDS] [SECONDS]     defaults: 3 rounds, 4 s per run
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-3}
secs=${2:-4}
bin="$root/.bin/reverie"
(cd "$root" && go build -o "$bin" ./cmd/reverie)
port=18123
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for round in $(seq "$rounds"); do
  for mode in none always interval never; do
    for payload in 400 40000; do
      data=$(mktemp -d)
      args=()
      [[ $mode != none ]] && args=(--checkpoint-dir "$data" --wal-fsync "$mode")
      "$bin" serve --listen "localhost:$port" --log-level warn "${args[@]}" &
      pid=$!
      sleep 0.4
      for kind in insert sample; do
        line=$("$bin" bench --addr "localhost:$port" --mode "$kind" --clients 8 \
          --payload "$payload" --duration "${secs}s" --json |
          python3 -c "import json,sys; d=json.load(sys.stdin)['$kind']; print('%.0f %.2f' % (d['items_per_sec'], d['p99_ms']))")
        echo "$round $mode $payload $kind $line" | tee -a "$out"
      done
      kill "$pid"; wait "$pid" 2>/dev/null || true
      rm -rf "$data"
    done
  done
done
python3 - "$out" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    _, mode, payload, kind, ips, p99 = line.split()
    runs[mode, payload, kind].append((float(ips), float(p99)))
print("\n| payload | kind | fsync | items/s (median) | vs no log | p99 ms (median) | runs (items/s) |")
print("|---|---|---|---|---|---|---|")
for payload in ("400", "40000"):
    for kind in ("insert", "sample"):
        base = statistics.median(r[0] for r in runs["none", payload, kind])
        for mode in ("none", "always", "interval", "never"):
            rs = runs[mode, payload, kind]
            med = statistics.median(r[0] for r in rs)
            print(f"| {payload} B | {kind} | {mode} | {med:,.0f} | {med / base:.2f}x | "
                  f"{statistics.median(r[1] for r in rs):.2f} | {', '.join(f'{r[0]:,.0f}' for r in rs)} |")
PY

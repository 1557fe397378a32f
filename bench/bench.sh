#!/usr/bin/env bash
# reverie against Reverb 0.14.0, side by side (issue 7).
#
#   bench/bench.sh            (make bench)        about 14 minutes
#   bench/bench.sh --quick    (make bench-quick)  about 100 seconds
#   bench/bench.sh [--quick] --only section5,queue,prioritized,echo
#
# Installs what it needs: builds reverie and the bench tools (bench/echo,
# bench/paced, bench/prioritized) into .bin/, sets up .venv-reverb with
# scripts/reverb-env.sh (dm-reverb 0.14.0: about a minute and 1.7 GB the
# first time) and a plotting venv in .bin/venv-bench
# (bench/requirements-plot.txt). Then runs bench/run.py with .venv-reverb's
# python inside a private network namespace that has only a loopback
# interface (the `__netns` entry of scripts/conformance.sh: Reverb's server
# binds every interface and cannot be told otherwise), so both servers and
# every client run on loopback only; then bench/plot.py.
#
# Writes bench/results/*.json and bench/results/tables.md, and the plots
# docs/bench-*.png (--quick: all of it under bench/results/quick/). Logs of
# every server and client: .bin/bench/logs/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export TF_CPP_MIN_LOG_LEVEL=2

profile=full
args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) profile=quick ;;
    --only) args+=(--only "$2"); shift ;;
    --only=*) args+=(--only "${1#--only=}") ;;
    *) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
t0=$(date +%s)

echo "bench: building reverie and bench/{echo,paced,prioritized}" >&2
mkdir -p .bin/bench
go build -o .bin/reverie ./cmd/reverie
for tool in echo paced prioritized; do
  go build -o ".bin/bench/$tool" "./bench/$tool"
done

py=$(scripts/reverb-env.sh)

venv=.bin/venv-bench
req=bench/requirements-plot.txt
want=$(sha256sum "$req" | cut -d' ' -f1)
if [[ ! -x $venv/bin/python || "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$want" ]]; then
  echo "bench: installing $req into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
  echo "$want" >"$venv/.requirements.sha256"
fi
echo "bench: set up in $(($(date +%s) - t0))s" >&2

source scripts/netns.sh
if ! private_netns; then
  echo "bench: cannot make a private network namespace (unshare -n);" \
    "refusing to start Reverb's server, which would listen on every interface" >&2
  exit 1
fi
t1=$(date +%s)
"${netns[@]}" bash scripts/conformance.sh __netns "$py" \
  "$py" bench/run.py --profile "$profile" ${args[@]+"${args[@]}"}

if [[ $profile == quick ]]; then
  out=bench/results/quick
  plots=bench/results/quick
else
  out=bench/results
  plots=docs
fi
"$venv/bin/python" bench/plot.py "$out" "$plots"
echo "bench: runs took $(($(date +%s) - t1))s, $(($(date +%s) - t0))s in all;" \
  "results in $out/ (tables.md), plots in $plots/" >&2

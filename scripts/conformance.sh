#!/usr/bin/env bash
# Conformance with Reverb, both ways: five legs, one matrix.
#
#   scripts/conformance.sh          (or: make conformance)
#
#   (a) DeepMind's unmodified dm-reverb client × reverie's server
#       (pytest conformance/ --server=reverie)
#   (b) dm-reverb client × Reverb's own server
#       (pytest conformance/ --server=reverb)
#   (c) reverie's Go client × the built `reverie serve` with
#       conformance/configs/go_client.yaml (the same Go tests run against an
#       in-process server in `go test ./...`)
#   (d) reverie's Go client × Reverb's server started by
#       conformance/reverb_launcher.py with conformance/configs/go_client.yaml
#       (the same tests with REVERIE_CONFORMANCE_ADDR/_SERVER set)
#   (e) dm-reverb client × reverie's local socket, on a server with TLS and
#       tokens on TCP (pytest conformance/local_socket; reverie only, as
#       Reverb has no such socket, so legs (a) and (b) leave it out)
#
# Sets up .venv-reverb with scripts/reverb-env.sh (dm-reverb 0.14.0 and its
# TensorFlow from PyPI: about a minute and 1.7 GB the first time), builds
# reverie and the Go test binary, runs the legs, prints each leg's passed and
# failed counts, the feature matrix (also written to
# .bin/conformance/matrix.md) and, last, alone on its line,
# `conformance: N passed, M failed`. Exits non-zero if anything failed.
# Logs of every leg are in .bin/conformance/.
#
# Reverb's server binds [::]:PORT, every interface, and cannot be told
# otherwise; legs (b) and (d) therefore run in a private network namespace
# (unshare -n; unshare -rn when not root) that has only a loopback
# interface. Where namespaces are not allowed they run without one, with a
# warning. Every step has a time limit; the whole run takes under a minute
# once the venv exists (about 75 s from nothing).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out="$root/.bin/conformance"
export TF_CPP_MIN_LOG_LEVEL=2
export CONFORMANCE_LOG_DIR="$out"  # the servers' logs of legs (a) and (b)

# Brings the loopback interface of the current network namespace up
# (a new namespace starts with it down), without needing iproute2.
lo_up() {
  "$1" - <<'EOF'
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
ifr = fcntl.ioctl(s, 0x8913, struct.pack('16sh', b'lo', 0))  # SIOCGIFFLAGS
flags = struct.unpack('16sh', ifr)[1]
fcntl.ioctl(s, 0x8914, struct.pack('16sh', b'lo', flags | 1))  # SIOCSIFFLAGS, IFF_UP
EOF
}

# Internal entry points, run inside the network namespace.
case "${1:-}" in
__netns)  # __netns PYTHON CMD...: loopback up, then CMD
  py=$2
  shift 2
  lo_up "$py" || exit 1
  exec "$@"
  ;;
__go_vs_reverb)  # __go_vs_reverb PYTHON TESTBIN: leg (d)
  py=$2 testbin=$3
  "$py" conformance/reverb_launcher.py conformance/configs/go_client.yaml \
    >"$out/d.launcher.out" 2>"$out/d.launcher.log" &
  lpid=$!
  trap 'kill -TERM $lpid 2>/dev/null' EXIT
  port=
  for _ in $(seq 900); do  # up to 180 s (TensorFlow's import)
    port=$(sed -n 's/^port=//p' "$out/d.launcher.out")
    [[ -n $port ]] && break
    kill -0 $lpid 2>/dev/null || break
    sleep 0.2
  done
  if [[ -z $port ]]; then
    echo "conformance: reverb_launcher.py did not start:" >&2
    cat "$out/d.launcher.log" >&2
    exit 1
  fi
  echo "Reverb server (reverb_launcher.py, go_client.yaml) on 127.0.0.1:$port"
  (cd client && REVERIE_CONFORMANCE_ADDR=127.0.0.1:$port REVERIE_CONFORMANCE_SERVER=reverb \
    timeout -k 10 300 "$testbin" -test.run '^TestConformance' -test.count=1 -test.v -test.timeout 240s)
  rc=$?
  kill -TERM $lpid 2>/dev/null
  for _ in $(seq 50); do kill -0 $lpid 2>/dev/null || break; sleep 0.2; done
  kill -KILL $lpid 2>/dev/null
  exit $rc
  ;;
__go_vs_reverie)  # __go_vs_reverie TESTBIN: leg (c)
  testbin=$2
  "$REVERIE_BIN" serve --config conformance/configs/go_client.yaml --listen localhost:0 \
    2>"$out/c.server.log" &
  spid=$!
  trap 'kill -TERM $spid 2>/dev/null' EXIT
  source scripts/serving.sh
  port=$(reverie_addr "$out/c.server.log" $spid) || exit 1
  port=${port##*:}
  echo "reverie serve (go_client.yaml) on 127.0.0.1:$port"
  (cd client && REVERIE_CONFORMANCE_ADDR=127.0.0.1:$port REVERIE_CONFORMANCE_SERVER=reverie \
    timeout -k 10 300 "$testbin" -test.run '^TestConformance' -test.count=1 -test.v -test.timeout 240s)
  rc=$?
  kill -TERM $spid 2>/dev/null
  wait $spid
  exit $rc
  ;;
esac

rm -rf "$out"
mkdir -p "$out"
t0=$(date +%s)
now() { echo $(($(date +%s) - t0)); }

# --- set-up --------------------------------------------------------------------
py=
if py=$(timeout 1200 scripts/reverb-env.sh); then
  echo "conformance: dm-reverb environment $py ($(now)s)"
else
  echo "conformance: scripts/reverb-env.sh failed: legs (a) and (b) cannot run" >&2
  py=
fi
if ! timeout 600 go build -o .bin/reverie ./cmd/reverie; then
  echo "conformance: go build of reverie failed" >&2
fi
export REVERIE_BIN="$root/.bin/reverie"
testbin="$out/client.test"
timeout 600 go test -c -o "$testbin" ./client || echo "conformance: go test -c ./client failed" >&2
"$testbin" -test.list '^TestConformance' >"$out/go.list" 2>/dev/null || true
if [[ -n $py ]]; then
  (timeout 300 "$py" -m pytest conformance --collect-only -q -p no:cacheprovider \
    --ignore=conformance/local_socket >"$out/pytest.list" 2>&1) || true
  (timeout 300 "$py" -m pytest conformance/local_socket --collect-only -q \
    -p no:cacheprovider >"$out/pytest-e.list" 2>&1) || true
fi
echo "conformance: built ($(now)s)"

source scripts/netns.sh
if ! private_netns; then
  echo "conformance: WARNING: no private network namespace (unshare -n failed);" \
    "Reverb's server will listen on every interface during legs (b) and (d)" >&2
fi
# in_netns CMD...: CMD in a private network namespace when possible.
in_netns() {
  if [[ ${#netns[@]} -gt 0 && -n $py ]]; then
    "${netns[@]}" bash "$0" __netns "$py" "$@"
  else
    "$@"
  fi
}

# --- legs --------------------------------------------------------------------
declare -A rc
leg() {  # leg ID TITLE CMD...: runs CMD, output to $out/ID.log
  local id=$1 title=$2 start
  shift 2
  start=$(date +%s)
  echo "conformance: leg ($id) $title ..."
  "$@" >"$out/$id.log" 2>&1
  rc[$id]=$?
  echo "conformance: leg ($id) exit code ${rc[$id]} in $(($(date +%s) - start))s (log: $out/$id.log)"
}
pytest_cmd=(timeout -k 10 600 "$py" -m pytest conformance -v -p no:cacheprovider
  -W ignore::DeprecationWarning --ignore=conformance/local_socket)
local_cmd=(timeout -k 10 300 "$py" -m pytest conformance/local_socket -v
  -p no:cacheprovider -W ignore::DeprecationWarning)
no_env() { echo "no dm-reverb environment (scripts/reverb-env.sh failed)"; return 1; }

if [[ -n $py ]]; then
  leg a "dm-reverb client x reverie server" "${pytest_cmd[@]}" --server=reverie
  leg b "dm-reverb client x Reverb server" in_netns "${pytest_cmd[@]}" --server=reverb
  leg e "dm-reverb client x reverie's local socket" "${local_cmd[@]}"
else
  leg a "dm-reverb client x reverie server" no_env
  leg b "dm-reverb client x Reverb server" no_env
  leg e "dm-reverb client x reverie's local socket" no_env
fi
if [[ -x $testbin && -x $REVERIE_BIN ]]; then
  leg c "reverie Go client x reverie serve" bash "$0" __go_vs_reverie "$testbin"
else
  leg c "reverie Go client x reverie serve" false
fi
if [[ -n $py && -x $testbin ]]; then
  leg d "reverie Go client x Reverb server" in_netns bash "$0" __go_vs_reverb "$py" "$testbin"
else
  leg d "reverie Go client x Reverb server" no_env
fi

# --- results -----------------------------------------------------------------
echo
echo "conformance: $(date -u +%Y-%m-%d), total $(now)s"
python3 conformance/matrix.py --out "$out/matrix.md" \
  --leg "b|dm-reverb client|Reverb server|pytest|$out/pytest.list|$out/b.log|${rc[b]}" \
  --leg "a|dm-reverb client|reverie server|pytest|$out/pytest.list|$out/a.log|${rc[a]}" \
  --leg "d|reverie Go client|Reverb server|go|$out/go.list|$out/d.log|${rc[d]}" \
  --leg "c|reverie Go client|reverie server|go|$out/go.list|$out/c.log|${rc[c]}" \
  --leg "e|dm-reverb client|reverie's local socket, TLS and tokens on TCP|pytest|$out/pytest-e.list|$out/e.log|${rc[e]}"

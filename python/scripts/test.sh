#!/usr/bin/env bash
# Tests reverie's Python client (python/) on a fresh machine, as CI does.
#
#   python/scripts/test.sh            everything
#   python/scripts/test.sh reverie    leg (a) only
#   python/scripts/test.sh setup      only the set-up (.venv-py, install)
#
# Set-up: .venv-py (Python 3, $REVERIE_PYTHON or python3) with the pinned
# python/requirements-test.txt, then the package installed as a user would:
# `pip install` of a copy of python/ (so that the build leaves nothing in
# the work tree). vermin then checks that the sources need nothing newer
# than Python 3.9.
#
#   (a) pytest python/tests --server=reverie: every test against
#       `reverie serve` ($REVERIE_BIN, else .bin/reverie built here).
#   (b) pytest of the write/sample tests (test_client, test_writer,
#       test_dataset, test_adders) --server=reverb: the same tests against
#       Reverb's own server (dm-reverb 0.14.0), started by
#       conformance/reverb_launcher.py with the interpreter of .venv-reverb
#       (scripts/reverb-env.sh). The client under test stays in .venv-py, so
#       it needs no TensorFlow. Reverb's server binds every interface, so
#       this leg runs in a private network namespace that has only loopback
#       (unshare -n; unshare -rn when not root), as scripts/conformance.sh
#       does; where that is not allowed it runs without, with a warning.
#
# Each leg prints pytest's summary; the last line is
# `python: N passed, M failed, K skipped` over both. Exits non-zero if
# anything failed. Server logs are in .bin/python-tests/.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
self="$root/python/scripts/test.sh"
cd "$root"
venv="$root/.venv-py"
out="$root/.bin/python-tests"

# Brings the loopback interface of the current network namespace up (a new
# namespace starts with it down), without needing iproute2.
lo_up() {
  "$1" - <<'EOF'
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
ifr = fcntl.ioctl(s, 0x8913, struct.pack('16sh', b'lo', 0))  # SIOCGIFFLAGS
flags = struct.unpack('16sh', ifr)[1]
fcntl.ioctl(s, 0x8914, struct.pack('16sh', b'lo', flags | 1))  # SIOCSIFFLAGS, IFF_UP
EOF
}

if [[ "${1:-}" == __netns ]]; then  # __netns PYTHON CMD...: loopback up, then CMD
  py=$2
  shift 2
  lo_up "$py" || exit 1
  exec "$@"
fi

legs=${1:-all}
t0=$(date +%s)
rm -rf "$out"
mkdir -p "$out"

# --- set-up ----------------------------------------------------------------
req="$root/python/requirements-test.txt"
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)
base=${REVERIE_PYTHON:-python3}
if [[ ! -x "$venv/bin/python" ]]; then
  echo "python: creating $venv with $base"
  "$base" -m venv "$venv" || exit 1
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  echo "python: installing $req"
  timeout 900 "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" || exit 1
  echo "$want" >"$stamp"
fi
copy=$(mktemp -d)
trap 'rm -rf "$copy"' EXIT
cp -r python "$copy/python"
rm -rf "$copy/python/build" "$copy/python/src/"*.egg-info
if ! timeout 600 "$venv/bin/pip" install -q --disable-pip-version-check \
    --force-reinstall --no-deps "$copy/python" >"$out/pip.log" 2>&1; then
  cat "$out/pip.log" >&2
  echo "python: pip install ./python failed" >&2
  exit 1
fi
# The runtime dependencies are satisfied by the pins (pip check also
# verifies pyproject.toml's bounds against them).
"$venv/bin/pip" check >"$out/pip-check.log" 2>&1 || { cat "$out/pip-check.log" >&2; exit 1; }
py="$venv/bin/python"
echo "python: $("$py" -c 'import sys, reverie, numpy, grpc, google.protobuf as pb, cramjam
print("reverie %s on Python %s (numpy %s, grpcio %s, protobuf %s, cramjam %s)" % (
    reverie.__version__, sys.version.split()[0], numpy.__version__,
    grpc.__version__, pb.__version__, cramjam.__version__))')"

[[ $legs == setup ]] && exit 0

if ! "$venv/bin/vermin" --target=3.9- --violations --no-tips --eval-annotations \
    python/src/reverie python/tests python/bench python/scripts >"$out/vermin.log" 2>&1; then
  cat "$out/vermin.log" >&2
  echo "python: vermin: the sources need a Python newer than 3.9" >&2
  exit 1
fi
echo "python: vermin: nothing newer than Python 3.9 needed"

if [[ -z "${REVERIE_BIN:-}" ]]; then
  timeout 600 go build -o .bin/reverie ./cmd/reverie || { echo "python: go build failed" >&2; exit 1; }
  export REVERIE_BIN="$root/.bin/reverie"
fi
export REVERIE_TEST_LOG_DIR="$out"

# Tests run from a directory outside the source tree so that `import reverie`
# finds the installed package, not python/src.
pytest_cmd=(timeout -k 10 600 "$py" -m pytest -p no:cacheprovider -q -rfEs
  --rootdir "$root/python" -c "$root/python/pyproject.toml")

declare -A rc
leg() {  # leg ID TITLE CMD...
  local id=$1 title=$2 start=$(date +%s)
  shift 2
  echo
  echo "=== python: leg ($id) $title"
  (cd "$out" && "$@") 2>&1 | tee "$out/$id.log"
  rc[$id]=${PIPESTATUS[0]}
  echo "python: leg ($id) exit code ${rc[$id]} in $(($(date +%s) - start))s"
}

leg a "reverie Python client x reverie serve" \
  "${pytest_cmd[@]}" "$root/python/tests" --server=reverie

if [[ $legs == all ]]; then
  reverb_py=
  if reverb_py=$(timeout 1200 scripts/reverb-env.sh); then
    netns=()
    if [[ $(id -u) == 0 ]] && unshare -n true 2>/dev/null; then
      netns=(unshare -n bash "$self" __netns "$py")
    elif unshare -rn true 2>/dev/null; then
      netns=(unshare -rn bash "$self" __netns "$py")
    else
      echo "python: WARNING: no private network namespace (unshare -n failed);" \
        "Reverb's server will listen on every interface during leg (b)" >&2
    fi
    tests=()
    for f in test_client test_writer test_dataset test_adders; do
      tests+=("$root/python/tests/$f.py")
    done
    leg b "reverie Python client x Reverb server" \
      "${netns[@]}" "${pytest_cmd[@]}" "${tests[@]}" --server=reverb \
      --reverb-python="$reverb_py"
  else
    echo "python: scripts/reverb-env.sh failed: leg (b) cannot run" >&2
    rc[b]=1
  fi
fi

# --- results -----------------------------------------------------------------
passed=0 failed=0 skipped=0
for id in a b; do
  [[ -f "$out/$id.log" ]] || continue
  line=$(grep -E '^=*.*[0-9]+ (passed|failed|error)' "$out/$id.log" | tail -1)
  for kind in passed failed skipped error errors; do
    n=$(sed -nE "s/.*[^0-9]([0-9]+) $kind([^a-z]|$).*/\1/p" <<<" $line" | head -1)
    n=${n:-0}
    case $kind in
      passed) passed=$((passed + n)) ;;
      skipped) skipped=$((skipped + n)) ;;
      *) failed=$((failed + n)) ;;
    esac
  done
done
status=0
for id in "${!rc[@]}"; do
  if [[ ${rc[$id]} != 0 ]]; then
    status=1
    [[ $failed == 0 ]] && failed=1  # a leg that died before pytest's summary
  fi
done
echo
echo "python: total $(($(date +%s) - t0))s; logs in $out"
echo "python: $passed passed, $failed failed, $skipped skipped"
exit $status

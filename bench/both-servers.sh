# Sourced by the bench scripts that measure reverie and Reverb side by side
# outside `make bench` (bench/steady.sh, bench/permsg.sh, bench/paced-ab.sh,
# bench/py-ab.sh), each in two stages: the script sets up (outer_stage) and
# re-runs itself with `__inner` inside a private network namespace
# (run_inner_in_netns), and there starts both servers (start_both_servers),
# fills their tables (fill_both_servers) and alternates between them
# (round_order).
# NAME prefixes their messages.
# round_ratios prints the per-round comparisons of steady.sh and py-ab.sh.

# run_inner_in_netns NAME PY SCRIPT ARGS...: runs `bash SCRIPT __inner PY
# ARGS...` in a private network namespace with only a loopback interface
# (scripts/netns.sh), or fails: Reverb's server listens on every interface.
run_inner_in_netns() {
  local name=$1 py=$2 script=$3
  shift 3
  source scripts/netns.sh
  if ! private_netns; then
    echo "$name: cannot make a private network namespace (unshare -n);" \
      "refusing to start Reverb's server, which would listen on every interface" >&2
    exit 1
  fi
  "${netns[@]}" bash scripts/conformance.sh __netns "$py" bash "$script" __inner "$py" "$@"
}

# start_both_servers NAME PY DIR: starts Reverb's server (the pinned
# dm-reverb's, conformance/reverb_launcher.py) and .bin/reverie serve, both
# on DIR/cfg.yaml and 127.0.0.1, and waits until both serve (up to 180 s:
# TensorFlow's import). Sets rpid, rport, vpid and vport, and the maps addr
# and pid keyed by server (reverb, reverie), and stops both servers when the
# shell exits.
start_both_servers() {
  local name=$1 py=$2 dir=$3
  "$py" conformance/reverb_launcher.py "$dir/cfg.yaml" >"$dir/reverb.out" 2>"$dir/reverb.log" &
  rpid=$!
  .bin/reverie serve --config "$dir/cfg.yaml" --listen 127.0.0.1:0 2>"$dir/reverie.log" &
  vpid=$!
  trap 'kill -TERM $rpid $vpid 2>/dev/null || true' EXIT
  rport= vport=
  for _ in $(seq 900); do
    rport=$(sed -n 's/^port=//p' "$dir/reverb.out")
    vport=$(sed -n 's/.*msg="reverie serving" addr=[^ ]*:\([0-9]*\) .*/\1/p' "$dir/reverie.log" | head -1)
    if [[ -n $rport && -n $vport ]]; then
      declare -gA addr=([reverb]=127.0.0.1:$rport [reverie]=127.0.0.1:$vport)
      declare -gA pid=([reverb]=$rpid [reverie]=$vpid)
      return 0
    fi
    sleep 0.2
  done
  echo "$name: a server did not start; logs in $dir" >&2
  cat "$dir/reverie.log" >&2
  exit 1
}

# fill_both_servers TABLE PAYLOAD ITEMS: inserts ITEMS items of PAYLOAD
# bytes into TABLE on both servers with `reverie bench` (4 writers), outside
# any measurement.
fill_both_servers() {
  local s
  for s in reverb reverie; do
    .bin/reverie bench --addr "${addr[$s]}" --table "$1" --mode insert --payload "$2" \
      --clients 4 --items "$3" >/dev/null
  done
}

# round_order R [SERVER...]: the servers (default: reverb reverie) in the
# order round R runs them, rotated by one each round so that a drift of the
# machine hits all alike: round 1 runs them as given.
round_order() {
  local r=$1
  shift
  local s=("$@")
  ((${#s[@]})) || s=(reverb reverie)
  local k=$(((r - 1) % ${#s[@]}))
  echo "${s[@]:k}" "${s[@]:0:k}"
}

# outer_stage NAME CONFIG ARGS...: the outer stage of such a script. Builds
# reverie, sets up the pinned dm-reverb (scripts/reverb-env.sh), writes the
# table config CONFIG (JSON) to DIR/cfg.yaml in a fresh temporary DIR
# (removed when the shell exits), and re-runs the calling script as
# `SCRIPT __inner PY DIR ARGS...` in the private network namespace.
outer_stage() {
  local name=$1 config=$2 py dir
  shift 2
  mkdir -p .bin/bench
  go build -o .bin/reverie ./cmd/reverie
  py=$(scripts/reverb-env.sh)
  dir=$(mktemp -d)
  # shellcheck disable=SC2064 # dir is fixed now
  trap "rm -rf '$dir'" EXIT
  echo "$config" >"$dir/cfg.yaml"
  run_inner_in_netns "$name" "$py" "$0" "$dir" "$@"
}

# round_ratios RUNS LABEL...: prints, for each round, reverie's figures over
# Reverb's. RUNS has one line per run, "ROUND SERVER VALUE...", with one
# LABEL per value.
round_ratios() {
  python3 - "$@" <<'PY'
import collections, sys
path, labels = sys.argv[1], sys.argv[2:]
runs = collections.defaultdict(dict)
for line in open(path):
  rnd, server, *vals = line.split()
  runs[int(rnd)][server] = [float(x) for x in vals]
for rnd, s in sorted(runs.items()):
  v, b = s['reverie'], s['reverb']
  print(f'round {rnd}: reverie/Reverb ' + ', '.join(f'{l} {x / y:.2f}x' for l, x, y in zip(labels, v, b)))
PY
}

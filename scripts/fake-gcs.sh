#!/usr/bin/env bash
# A server speaking Google Cloud Storage's JSON API for the gs:// snapshot
# tests: fake-gcs-server, built from a pinned release with `go install`
# into .bin/ (about a minute the first time on 2 cores), run on 127.0.0.1
# only, keeping objects in memory, with one bucket made at start.
#
#   scripts/fake-gcs.sh install       build .bin/fake-gcs-server if missing
#   scripts/fake-gcs.sh start DIR     install, start on a free loopback port,
#                                     and write DIR/env (sourceable exports of
#                                     STORAGE_EMULATOR_HOST and
#                                     REVERIE_TEST_GCS_URL)
#   scripts/fake-gcs.sh stop DIR      stop the server that start left in DIR
#
# It is an emulator, not Google's service: it checks what reverie's gs://
# driver sends and answers as the JSON API does, but not credentials,
# quotas or Google's own behaviour under failure.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=v1.56.1
bin="$root/.bin/fake-gcs-server"
stamp="$root/.bin/fake-gcs-server.version"
bucket=reverie-test

install() {
  if [[ -x "$bin" && "$(cat "$stamp" 2>/dev/null)" == "$version" ]]; then
    return
  fi
  mkdir -p "$root/.bin"
  echo "fake-gcs.sh: go install github.com/fsouza/fake-gcs-server@$version" >&2
  local start=$SECONDS
  GOBIN="$root/.bin" go install "github.com/fsouza/fake-gcs-server@$version"
  echo "$version" >"$stamp"
  echo "fake-gcs.sh: installed in $((SECONDS - start))s" >&2
}

# free_port prints a loopback TCP port nothing listens on.
free_port() {
  local port
  for _ in $(seq 100); do
    port=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  echo "fake-gcs.sh: no free port found" >&2
  return 1
}

start() {
  local dir=$1
  install
  # The server makes a bucket of each directory under -data at start.
  mkdir -p "$dir/data/$bucket"
  dir=$(cd "$dir" && pwd)
  local port
  port=$(free_port)
  local endpoint="http://127.0.0.1:$port"
  "$bin" -scheme http -host 127.0.0.1 -port "$port" -backend memory \
    -data "$dir/data" -public-host "127.0.0.1:$port" -external-url "$endpoint" \
    -log-level warn >"$dir/fake-gcs.log" 2>&1 &
  echo $! >"$dir/pid"
  for i in $(seq 300); do
    if curl -fs -o /dev/null "$endpoint/storage/v1/b/$bucket"; then
      break
    fi
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "fake-gcs.sh: fake-gcs-server exited; its log:" >&2
      cat "$dir/fake-gcs.log" >&2
      return 1
    fi
    if ((i == 300)); then
      echo "fake-gcs.sh: fake-gcs-server did not answer on $endpoint within 30s; its log:" >&2
      cat "$dir/fake-gcs.log" >&2
      stop "$dir"
      return 1
    fi
    sleep 0.1
  done
  cat >"$dir/env" <<EOT
export STORAGE_EMULATOR_HOST=127.0.0.1:$port
export REVERIE_TEST_GCS_URL=gs://$bucket
EOT
  echo "fake-gcs.sh: fake-gcs-server serving $endpoint (pid $(cat "$dir/pid")); source $dir/env" >&2
}

stop() {
  local dir=$1
  [[ -f "$dir/pid" ]] || return 0
  local pid
  pid=$(cat "$dir/pid")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$dir/pid"
}

case "${1:-}" in
  install) install ;;
  start) start "${2:?usage: fake-gcs.sh start DIR}" ;;
  stop) stop "${2:?usage: fake-gcs.sh stop DIR}" ;;
  *)
    echo "usage: scripts/fake-gcs.sh install | start DIR | stop DIR" >&2
    exit 2
    ;;
esac

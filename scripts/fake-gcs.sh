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
me=fake-gcs.sh
# shellcheck source=scripts/local-server.sh
source "$root/scripts/local-server.sh"

install() { install_pinned fake-gcs-server github.com/fsouza/fake-gcs-server "$version"; }

bucket=reverie-test

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

case "${1:-}" in
  install) install ;;
  start) start "${2:?usage: fake-gcs.sh start DIR}" ;;
  stop) stop "${2:?usage: fake-gcs.sh stop DIR}" ;;
  *)
    echo "usage: scripts/fake-gcs.sh install | start DIR | stop DIR" >&2
    exit 2
    ;;
esac

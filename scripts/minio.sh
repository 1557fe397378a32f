#!/usr/bin/env bash
# A real S3-compatible server for the remote snapshot tests: MinIO, built
# from a pinned commit with `go install` into .bin/ (about 4 minutes the
# first time on 2 cores, seconds once the build cache has it), run on
# 127.0.0.1 only, with its data in a directory the caller gives.
#
#   scripts/minio.sh install       build .bin/minio if missing
#   scripts/minio.sh start DIR     install, start on a free loopback port with
#                                  data in DIR/data, create the bucket, and
#                                  write DIR/env (sourceable exports of
#                                  REVERIE_TEST_S3_URL and the credentials)
#   scripts/minio.sh stop DIR      stop the server that start left in DIR
#
# MinIO publishes no semver tags, so the pin is a pseudo-version of its
# repository; the module has no replace directives and builds with Go 1.26.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
minio_version=v0.0.0-20260212201848-7aac2a2c5b7c
bin="$root/.bin/minio"
me=minio.sh
# shellcheck source=scripts/local-server.sh
source "$root/scripts/local-server.sh"

install() { install_pinned minio github.com/minio/minio "$minio_version"; }

bucket=reverie-test
user=reverie-test
password=reverie-test-secret

start() {
  local dir=$1
  install
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  local port console
  port=$(free_port)
  console=$(free_port)
  MINIO_ROOT_USER=$user MINIO_ROOT_PASSWORD=$password \
    MINIO_BROWSER=off MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
    "$bin" server --quiet --address "127.0.0.1:$port" --console-address "127.0.0.1:$console" \
    "$dir/data" >"$dir/minio.log" 2>&1 &
  echo $! >"$dir/pid"
  local endpoint="http://127.0.0.1:$port"
  for i in $(seq 300); do
    if curl -fs -o /dev/null "$endpoint/minio/health/live"; then
      break
    fi
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then
      echo "minio.sh: MinIO exited; its log:" >&2
      cat "$dir/minio.log" >&2
      return 1
    fi
    if ((i == 300)); then
      echo "minio.sh: MinIO did not answer on $endpoint within 30s; its log:" >&2
      cat "$dir/minio.log" >&2
      stop "$dir"
      return 1
    fi
    sleep 0.1
  done
  # Create the bucket with a signed PUT (curl signs AWS SigV4 itself).
  curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$user:$password" -X PUT "$endpoint/$bucket" >/dev/null
  cat >"$dir/env" <<EOF
export AWS_ACCESS_KEY_ID=$user
export AWS_SECRET_ACCESS_KEY=$password
export REVERIE_TEST_S3_URL='s3://$bucket?endpoint=$endpoint&region=us-east-1&use_path_style=true'
EOF
  echo "minio.sh: MinIO serving $endpoint (pid $(cat "$dir/pid")); source $dir/env" >&2
}

case "${1:-}" in
  install) install ;;
  start) start "${2:?usage: minio.sh start DIR}" ;;
  stop) stop "${2:?usage: minio.sh stop DIR}" ;;
  *)
    echo "usage: scripts/minio.sh install | start DIR | stop DIR" >&2
    exit 2
    ;;
esac

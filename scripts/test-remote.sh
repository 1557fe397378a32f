#!/usr/bin/env bash
# The remote snapshot tests against a real object store on loopback, shared
# by scripts/test-s3.sh and scripts/test-gcs.sh:
#
#   scripts/test-remote.sh s3    MinIO (scripts/minio.sh): TestS3, TestSnapshotsS3
#   scripts/test-remote.sh gcs   fake-gcs-server (scripts/fake-gcs.sh), in
#                                binaries built with -tags gcs (the driver is
#                                opt-in): TestGCS, TestSnapshotsGCS
#
# It starts the server, runs the tests with its environment, and stops it.
# It fails if any of the tests is skipped or missing, so that CI cannot pass
# without them running.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

case "${1:-}" in
  s3) name=test-s3.sh server=scripts/minio.sh what="S3 tests" against=MinIO
    want=(TestS3 TestSnapshotsS3) flags=() ;;
  gcs) name=test-gcs.sh server=scripts/fake-gcs.sh what="GCS tests" against=fake-gcs-server
    want=(TestGCS TestSnapshotsGCS) flags=(-tags gcs) ;;
  *)
    echo "usage: scripts/test-remote.sh s3 | gcs" >&2
    exit 2
    ;;
esac
tests="^($(IFS='|'; echo "${want[*]}"))\$"

dir=$(mktemp -d)
cleanup() {
  "$server" stop "$dir"
  rm -rf "$dir"
}
trap cleanup EXIT
"$server" start "$dir"

set +e
out=$(
  # shellcheck disable=SC1091
  source "$dir/env"
  go test "${flags[@]}" -race -count=1 -v -run "$tests" ./internal/remote/ ./server/ 2>&1
)
status=$?
set -e
grep -E -- '^(--- |    --- |ok |FAIL|PASS$)' <<<"$out" || true
if ((status != 0)); then
  echo "$out" >&2
  echo "$name: go test failed (status $status)" >&2
  exit 1
fi
if grep -q -- '--- SKIP' <<<"$out"; then
  echo "$name: $what were skipped; they must run here" >&2
  exit 1
fi
for t in "${want[@]}"; do
  if ! grep -q -- "^--- PASS: $t " <<<"$out"; then
    echo "$name: $t did not run and pass" >&2
    exit 1
  fi
done
echo "$name: $what passed against $against"

#!/usr/bin/env bash
# The remote snapshot tests against a real S3-compatible server: starts
# MinIO on loopback (scripts/minio.sh), runs the S3 tests with
# REVERIE_TEST_S3_URL set, and stops it. It fails if any of the tests is
# skipped or missing, so that CI cannot pass without them running.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

tests='^(TestS3|TestSnapshotsS3)$'
want=(TestS3 TestSnapshotsS3)

dir=$(mktemp -d)
cleanup() {
  scripts/minio.sh stop "$dir"
  rm -rf "$dir"
}
trap cleanup EXIT
scripts/minio.sh start "$dir"

set +e
out=$(
  # shellcheck disable=SC1091
  source "$dir/env"
  go test -race -count=1 -v -run "$tests" ./internal/remote/ ./server/ 2>&1
)
status=$?
set -e
grep -E -- '^(--- |    --- |ok |FAIL|PASS$)' <<<"$out" || true
if ((status != 0)); then
  echo "$out" >&2
  echo "test-s3.sh: go test failed (status $status)" >&2
  exit 1
fi
if grep -q -- '--- SKIP' <<<"$out"; then
  echo "test-s3.sh: S3 tests were skipped; they must run here" >&2
  exit 1
fi
for t in "${want[@]}"; do
  if ! grep -q -- "^--- PASS: $t " <<<"$out"; then
    echo "test-s3.sh: $t did not run and pass" >&2
    exit 1
  fi
done
echo "test-s3.sh: S3 tests passed against MinIO"

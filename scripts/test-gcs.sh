#!/usr/bin/env bash
# The remote snapshot tests against a server speaking Google Cloud
# Storage's JSON API: starts fake-gcs-server on loopback
# (scripts/fake-gcs.sh), runs the gs:// tests in binaries built with
# -tags gcs (the driver is opt-in), and stops it. It fails if any of the
# tests is skipped or missing, so that CI cannot pass without them running.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

tests='^(TestGCS|TestSnapshotsGCS)$'
want=(TestGCS TestSnapshotsGCS)

dir=$(mktemp -d)
cleanup() {
  scripts/fake-gcs.sh stop "$dir"
  rm -rf "$dir"
}
trap cleanup EXIT
scripts/fake-gcs.sh start "$dir"

set +e
out=$(
  # shellcheck disable=SC1091
  source "$dir/env"
  go test -tags gcs -race -count=1 -v -run "$tests" ./internal/remote/ ./server/ 2>&1
)
status=$?
set -e
grep -E -- '^(--- |    --- |ok |FAIL|PASS$)' <<<"$out" || true
if ((status != 0)); then
  echo "$out" >&2
  echo "test-gcs.sh: go test failed (status $status)" >&2
  exit 1
fi
if grep -q -- '--- SKIP' <<<"$out"; then
  echo "test-gcs.sh: GCS tests were skipped; they must run here" >&2
  exit 1
fi
for t in "${want[@]}"; do
  if ! grep -q -- "^--- PASS: $t " <<<"$out"; then
    echo "test-gcs.sh: $t did not run and pass" >&2
    exit 1
  fi
done
echo "test-gcs.sh: GCS tests passed against fake-gcs-server"

#!/usr/bin/env bash
# HTTP/2 conformance of reverie's own transport (server/h2grpc): h2spec
# v2.2.1, built from the Go module proxy with the dependencies pinned in
# tools/h2spec/go.mod, against `reverie serve --transport own` on loopback. Every test must pass except those listed, with reasons, in
# scripts/h2spec-expected.txt; a listed test that passes fails the check
# too, so that the list stays true.
#
#   scripts/h2spec.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mkdir -p .bin
go -C tools/h2spec build -o "$root/.bin/h2spec" github.com/summerwind/h2spec/cmd/h2spec
go build -o .bin/reverie ./cmd/reverie
dir=$(mktemp -d)
.bin/reverie serve --transport own --listen 127.0.0.1:0 2>"$dir/serve.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
source scripts/serving.sh
addr=$(reverie_addr "$dir/serve.log" $pid) || exit 1
# h2spec exits non-zero when any test fails; the list decides.
.bin/h2spec -h "${addr%:*}" -p "${addr##*:}" -o 2 --junit-report "$dir/report.xml" >"$dir/h2spec.out" 2>&1 || true
tail -n 1 "$dir/h2spec.out"
python3 - "$dir/report.xml" scripts/h2spec-expected.txt <<'PY'
import sys
import xml.etree.ElementTree as ET

report, expected_file = sys.argv[1], sys.argv[2]
expected = set()
for line in open(expected_file):
    line = line.strip()
    if line and not line.startswith('#'):
        pkg, name = (p.strip() for p in line.split('|', 1))
        expected.add((pkg, name))
failed, passed, total = set(), set(), 0
for case in ET.parse(report).iter('testcase'):
    total += 1
    key = (case.get('package'), case.get('classname'))
    if case.find('failure') is not None or case.find('error') is not None:
        failed.add(key)
    elif case.find('skipped') is None:
        passed.add(key)
if total == 0:
    sys.exit('h2spec.sh: the report lists no tests')
bad = False
for pkg, name in sorted(failed - expected):
    print(f'h2spec.sh: unexpected failure: {pkg} | {name}')
    bad = True
for pkg, name in sorted(expected & passed):
    print(f'h2spec.sh: now passes, take it off scripts/h2spec-expected.txt: {pkg} | {name}')
    bad = True
for pkg, name in sorted(expected - failed - passed):
    print(f'h2spec.sh: listed but not run: {pkg} | {name}')
    bad = True
print(f'h2spec.sh: {total} tests, {len(passed)} passed, {len(failed)} failed as listed' if not bad else '')
sys.exit(1 if bad else 0)
PY

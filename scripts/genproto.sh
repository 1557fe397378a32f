#!/usr/bin/env bash
# Generates the Go code in api/ from proto/. With --check it generates into a
# temporary directory and fails if the committed code differs.
#
# protoc comes from the pinned grpcio-tools in .venv (scripts/venv.sh); the Go
# plugins are pinned as tools in go.mod.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=$(scripts/venv.sh)
wkt=$("$py" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')
gen_go=$(go tool -n protoc-gen-go)
gen_grpc=$(go tool -n protoc-gen-go-grpc)

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
mapfile -t files < <(cd proto && find . -name '*.proto' | sed 's|^\./||' | sort)
"$py" -m grpc_tools.protoc -I proto -I "$wkt" \
  --plugin=protoc-gen-go="$gen_go" --plugin=protoc-gen-go-grpc="$gen_grpc" \
  --go_out="$out" --go_opt=module=github.com/reverie-rl/reverie \
  --go-grpc_out="$out" --go-grpc_opt=module=github.com/reverie-rl/reverie \
  "${files[@]}"

if [[ "${1:-}" == "--check" ]]; then
  if ! diff -r "$out/api" api >/dev/null; then
    diff -r "$out/api" api | head -40 >&2
    echo "genproto: api/ is stale; run scripts/genproto.sh and commit the result" >&2
    exit 1
  fi
  echo "genproto: api/ matches proto/"
  exit 0
fi
rm -rf api
cp -r "$out/api" api
echo "genproto: wrote api/"

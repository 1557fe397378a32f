#!/usr/bin/env bash
# Generates the Go code in api/ and the Python client's stubs in
# python/src/reverie/_proto/ from proto/. With --check it generates into a
# temporary directory and fails if the committed code differs.
#
# protoc comes from the pinned grpcio-tools in .venv (scripts/venv.sh); the Go
# plugins are pinned as tools in go.mod. The Python modules are protoc's
# --python_out, --pyi_out and --grpc_python_out, rewritten by
# python/scripts/fix_stubs.py to live in the package reverie._proto (imports,
# and a private descriptor pool).
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

pystubs=python/src/reverie/_proto
mkdir -p "$out/py_raw" "$out/py"
"$py" -m grpc_tools.protoc -I proto -I "$wkt" \
  --python_out="$out/py_raw" --pyi_out="$out/py_raw" --grpc_python_out="$out/py_raw" \
  "${files[@]}"
"$py" python/scripts/fix_stubs.py "$out/py_raw" "$out/py"

if [[ "${1:-}" == "--check" ]]; then
  stale=0
  if ! diff -r "$out/api" api >/dev/null; then
    diff -r "$out/api" api | head -40 >&2
    echo "genproto: api/ is stale; run scripts/genproto.sh and commit the result" >&2
    stale=1
  fi
  if ! diff -r -x __pycache__ "$out/py" "$pystubs" >/dev/null; then
    diff -r -x __pycache__ "$out/py" "$pystubs" | head -40 >&2
    echo "genproto: $pystubs is stale; run scripts/genproto.sh and commit the result" >&2
    stale=1
  fi
  [[ $stale == 0 ]] || exit 1
  echo "genproto: api/ and $pystubs match proto/"
  exit 0
fi
rm -rf api
cp -r "$out/api" api
rm -rf "$pystubs"
mkdir -p "$(dirname "$pystubs")"
cp -r "$out/py" "$pystubs"
echo "genproto: wrote api/ and $pystubs"

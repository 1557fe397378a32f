#!/usr/bin/env bash
# Creates (or reuses) a Python 3.11 venv at .venv-reverb with DeepMind's
# unmodified Reverb client (dm-reverb 0.14.0) and the TensorFlow it was built
# against, pinned in conformance/requirements-reverb.txt. Idempotent: it
# reinstalls only when the requirements change, and records them only after
# `import reverb` and an in-process Reverb server work. Prints the venv's
# python path on stdout; everything else goes to stderr.
#
#   py=$(scripts/reverb-env.sh) && "$py" -m pytest conformance
#
# The first run downloads about 500 MB from PyPI and takes the venv to about
# 1.7 GB. REVERB_PYTHON names the interpreter to build it with (default:
# python3.11, else python3); it must be CPython 3.11 on x86-64 Linux, the only
# platform dm-reverb 0.14.0 has wheels for that this project uses.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv="$root/.venv-reverb"
req="$root/conformance/requirements-reverb.txt"
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$req" | cut -d' ' -f1)

py_version() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }

if [[ -x "$venv/bin/python" && "$(py_version "$venv/bin/python")" != 3.11 ]]; then
  echo "reverb-env: $venv is not Python 3.11; recreating it" >&2
  rm -rf "$venv"
fi
if [[ ! -x "$venv/bin/python" ]]; then
  base=${REVERB_PYTHON:-$(command -v python3.11 || command -v python3 || true)}
  if [[ -z "$base" ]] || [[ "$(py_version "$base")" != 3.11 ]]; then
    echo "reverb-env: need Python 3.11 (set REVERB_PYTHON); got ${base:-none}" >&2
    exit 1
  fi
  echo "reverb-env: creating $venv with $base" >&2
  "$base" -m venv "$venv" >&2
fi
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  rm -f "$stamp"
  echo "reverb-env: installing $req" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$req" >&2
  # The real check: the compiled extension loads against this TensorFlow and a
  # Reverb server starts (an ABI mismatch shows up here, not at pip time).
  TF_CPP_MIN_LOG_LEVEL=2 "$venv/bin/python" -c '
import reverb
server = reverb.Server(tables=[reverb.Table.queue("q", 10)], port=None)
server.stop()
' >&2
  echo "$want" >"$stamp"
fi
echo "$venv/bin/python"

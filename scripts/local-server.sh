# Shell functions shared by the scripts that run a test server on loopback
# (scripts/minio.sh, scripts/fake-gcs.sh); source it after setting me (the
# script's name, for messages) and root (the repository).

# install_pinned BIN MODULE VERSION builds .bin/BIN with go install unless
# .bin/BIN.version already holds VERSION.
install_pinned() {
  local bin="$root/.bin/$1" module=$2 version=$3
  if [[ -x "$bin" && "$(cat "$bin.version" 2>/dev/null)" == "$version" ]]; then
    return
  fi
  mkdir -p "$root/.bin"
  echo "$me: go install $module@$version" >&2
  local start=$SECONDS
  GOBIN="$root/.bin" go install "$module@$version"
  echo "$version" >"$bin.version"
  echo "$me: installed in $((SECONDS - start))s" >&2
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
  echo "$me: no free port found" >&2
  return 1
}

# stop DIR stops the server whose pid start left in DIR/pid.
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

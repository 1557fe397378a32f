# Sourced by the scripts that start `reverie serve` and need its address.
#
#   reverie_addr LOG [PID] [SECONDS]
#
# Waits until the server writing its log to LOG says "reverie serving", and
# prints the address of its first listener (host:port; callers that want
# only the port take ${addr##*:}). Gives up, printing the log to stderr and
# returning 1, when PID has exited or SECONDS (default 20) have passed, so a
# server that fails at start is reported at once instead of after a timeout.
reverie_addr() {
  local log=$1 pid=${2:-} secs=${3:-20} addr= i
  for (( i = 0; i < secs * 20; i++ )); do
    addr=$(sed -n 's/.*msg="reverie serving" addr=\([^ ]*\).*/\1/p' "$log" 2>/dev/null | head -1)
    if [[ -n $addr ]]; then
      echo "$addr"
      return 0
    fi
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then
      echo "reverie serve exited before serving; its log:" >&2
      cat "$log" >&2
      return 1
    fi
    sleep 0.05
  done
  echo "reverie serve did not start in ${secs}s; its log:" >&2
  cat "$log" >&2
  return 1
}

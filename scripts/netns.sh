# Sourced by the scripts that start Reverb's server, which binds every
# interface and cannot be told otherwise: they run it in a private network
# namespace that has only a loopback interface.
#
# private_netns sets the array netns to the command that runs another in
# such a namespace: `unshare -n` as root, `unshare -rn` otherwise. It
# returns 1, with netns empty, when neither is allowed here.
private_netns() {
  netns=()
  if [[ $(id -u) == 0 ]] && unshare -n true 2>/dev/null; then
    netns=(unshare -n)
  elif unshare -rn true 2>/dev/null; then
    netns=(unshare -rn)
  else
    return 1
  fi
}

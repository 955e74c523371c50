#!/usr/bin/env bash
# Runs test-fault-netns-stale (argument 1) inside a private network
# namespace: its own loopback, on which the test starts its master and
# drops one connection's packets with iptables, so that nothing of it
# touches the host's network or firewall. Root only (exit 77 = skipped
# otherwise, or when namespaces or iptables are unavailable). The
# namespace, and any process left in it (by PID), are removed on exit.
set -euo pipefail
exe=$1
[ "$(id -u)" -eq 0 ] || { echo "not root: skipped"; exit 77; }
for t in ip iptables redis-server; do
  command -v "$t" >/dev/null || { echo "$t missing: skipped"; exit 77; }
done
ns="rl$$stale"
cleanup() {
  local p
  for p in $(ip netns pids "$ns" 2>/dev/null); do
    kill -KILL "$p" 2>/dev/null || true
  done
  ip netns del "$ns" 2>/dev/null || true
}
ip netns add "$ns" 2>/dev/null || {
  echo "cannot create a network namespace: skipped"; exit 77; }
trap cleanup EXIT
trap 'exit 143' TERM INT
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" iptables -S INPUT >/dev/null 2>&1 || {
  echo "iptables unusable in a namespace: skipped"; exit 77; }
# Last command: its status is the script's (the EXIT trap cleans up).
REDLOCK_NETNS=$ns ip netns exec "$ns" "$exe"

#!/usr/bin/env bash
# The fault proxy standing in for toxiproxy (the compose kit's drill,
# issue 34): started with toxiproxy's command line and a toxiproxy config
# (one upstream by host name, looked up per connection; one by address),
# it must answer the fault recipes of cluster-compose/README.md, taken
# from the README and run as written (only the API port differs: a free
# one, not 8474), with the faults they name:
#   - latency 200: a PING through it takes at least 350 ms (200 each way);
#   - lost replies (timeout 0 downstream): a SET gets no reply, and lands;
#   - connection reset: the client sees a reset;
#   - refused: connection refused;
#   - end a proxy fault (POST /reset): PONG again;
#   - a toxic it does not model: 400, and the proxy's state unchanged; an
#     unknown proxy: 404; a config without proxies: a clear error, exit 65.
# One redis-server and the proxy, both ours, killed by PID on exit.
set -euo pipefail
proxy=$1
readme=$2
for t in redis-server redis-cli curl; do
  command -v "$t" >/dev/null || { echo "FAIL: $t missing"; exit 1; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/redlock-fphttp.XXXXXX")
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; cat "$work/proxy.log" 2>/dev/null || true; exit 1; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# Four free ports in a row (redis, two proxies, the HTTP API), below the
# kernel's ephemeral range (a port there can be taken by any outgoing
# connection between the check and the bind); a port that a parallel test
# takes meanwhile makes the start fail: it is tried again (start_all).
eph_lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
pick_ports() {
  local try b
  base=""
  for try in $(seq 0 40); do
    b=$(( 21000 + (($$ + RANDOM + try * 97) % (eph_lo - 21000 - 8)) ))
    port_busy "$b" || port_busy $((b + 1)) || port_busy $((b + 2)) ||
      port_busy $((b + 3)) || { base=$b; break; }
  done
  [ -n "$base" ] || fail "no four free ports"
  rp=$base p1=$((base + 1)) p2=$((base + 2)) hp=$((base + 3))
}

ping_ok() { timeout 5 redis-cli -p "$1" PING 2>/dev/null | grep -q PONG; }
alive() { kill -0 "$1" 2>/dev/null; }
wait_for() {   # what, then a command: bounded poll, 20 s
  local what=$1 t=$((SECONDS + 20)); shift
  while [ "$SECONDS" -lt "$t" ]; do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  fail "$what not within 20 s"
}
stop_started() {
  local p
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}

# redis-server, then the bad-input check, then the proxy: 0 when both
# answer, 1 when a port was taken (the caller picks others).
start_all() {
  local t rc
  redis-server --port "$rp" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" --protected-mode no --daemonize no >"$work/redis.log" 2>&1 &
  pids+=($!)
  t=$((SECONDS + 20))
  until ping_ok "$rp"; do
    alive "${pids[0]}" || return 1
    [ "$SECONDS" -lt "$t" ] || fail "redis-server not within 20 s"
    sleep 0.05
  done
  # Bad input first: a clear error, no crash.
  echo '[]' >"$work/empty.json"
  rc=0
  "$proxy" -host=127.0.0.1 -config="$work/empty.json" -port="$hp" \
    2>"$work/err.log" || rc=$?
  [ "$rc" = 65 ] && grep -q "no proxies" "$work/err.log" ||
    fail "a config without proxies: exit $rc, $(cat "$work/err.log")"
  printf '%s\n' '[' \
    "  {\"name\": \"redis1\", \"listen\": \"127.0.0.1:$p1\", \"upstream\": \"localhost:$rp\", \"enabled\": true}," \
    "  {\"name\": \"redis2\", \"listen\": \"127.0.0.1:$p2\", \"upstream\": \"127.0.0.1:$rp\", \"enabled\": true}" \
    ']' >"$work/toxiproxy.json"
  "$proxy" -host=127.0.0.1 -config="$work/toxiproxy.json" -port="$hp" \
    >"$work/proxy.log" 2>&1 &
  pids+=($!)
  t=$((SECONDS + 20))
  until ping_ok "$p1" && ping_ok "$p2"; do
    alive "${pids[1]}" || return 1
    [ "$SECONDS" -lt "$t" ] || fail "the proxy not within 20 s"
    sleep 0.05
  done
}

started=0
for attempt in 1 2 3 4 5; do
  pick_ports
  if start_all; then
    started=1
    break
  fi
  echo "attempt $attempt: ports $base-$((base + 3)) taken meanwhile" \
    "($(tail -1 "$work/proxy.log" 2>/dev/null)): others"
  stop_started
done
[ "$started" = 1 ] || fail "five starts lost their ports"

# The recipe of a fault, from the README's table (containers' column).
recipe() {
  local line
  line=$(grep -F "| $1" "$readme" | head -1 | awk -F'|' '{print $3}' |
         sed 's/^ *`//; s/` *$//')
  [ -n "$line" ] || fail "no recipe for '$1' in $readme"
  echo "${line//127.0.0.1:8474/127.0.0.1:$hp}"
}
run_recipe() {
  local r
  r=$(recipe "$1")
  echo "recipe: $r"
  sh -c "$r" >"$work/reply" 2>&1 || fail "recipe '$1' failed: $(cat "$work/reply")"
}
ms() { date +%s%3N; }

run_recipe "latency"
t0=$(ms)
ping_ok "$p2" || fail "no PONG with latency"
el=$(( $(ms) - t0 ))
echo "latency 200: PING took $el ms"
[ "$el" -ge 350 ] || fail "latency 200: a PING took $el ms (< 350)"

run_recipe "lost replies"
rc=0
timeout 2 redis-cli -p "$p2" SET fphttp landed >/dev/null 2>&1 || rc=$?
[ "$rc" = 124 ] || fail "lost replies: the SET was answered (exit $rc)"
[ "$(redis-cli -p "$rp" GET fphttp)" = landed ] ||
  fail "lost replies: the SET did not land"
echo "lost replies: no reply in 2 s, the SET landed"

run_recipe "connection reset"
out=$(timeout 5 redis-cli -p "$p2" PING 2>&1 || true)
grep -qi "reset" <<<"$out" || fail "reset: $out"
echo "connection reset: $out"

run_recipe "refused"
out=$(timeout 5 redis-cli -p "$p2" PING 2>&1 || true)
grep -qi "refused" <<<"$out" || fail "refused: $out"
echo "refused: $out"

# Not modelled: refused, and nothing changes.
code=$(curl -s -o "$work/reply" -w '%{http_code}' -XPOST \
  "127.0.0.1:$hp/proxies/redis2/toxics" -d '{"type":"bandwidth","attributes":{"rate":1}}')
[ "$code" = 400 ] || fail "bandwidth toxic: HTTP $code"
curl -s "127.0.0.1:$hp/proxies/redis2" | grep -q '"enabled":false' ||
  fail "a refused toxic changed the proxy's state"
code=$(curl -s -o /dev/null -w '%{http_code}' -XPOST \
  "127.0.0.1:$hp/proxies/nosuch/toxics" -d '{"type":"latency"}')
[ "$code" = 404 ] || fail "unknown proxy: HTTP $code"

run_recipe "end a proxy fault"
wait_for "PONG after the reset" ping_ok "$p2"
ping_ok "$p1" || fail "redis1 (upstream by name) lost"
curl -s "127.0.0.1:$hp/proxies" | grep -q '"redis2":{[^}]*"enabled":true,"toxics":\[\]' ||
  fail "after POST /reset: $(curl -s "127.0.0.1:$hp/proxies")"
echo "end: PONG again, no toxics"
echo "PASS"

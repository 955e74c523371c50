#!/usr/bin/env bash
# cluster.sh: N independent redis-server masters on 127.0.0.1 as plain
# processes (no containers), for the demo, tests and failure drills.
#
#   cluster.sh up [N=5] [BASEPORT=7101]   start N masters on BASEPORT..
#   cluster.sh down                       stop them (only our own PIDs)
#   cluster.sh status                     per master: pid, state, PING
#   cluster.sh addrs                      the client URIs, comma-separated
#   cluster.sh tls-ca                     the CA file of a TLS cluster
#   cluster.sh pause I | resume I         SIGSTOP / SIGCONT master I (1..N)
#   cluster.sh kill I                     SIGKILL master I (keys lost)
#   cluster.sh restart I                  start master I again
#   cluster.sh slow I MS                  add MS latency each way (proxy)
#   cluster.sh blackhole I                requests arrive, replies are lost
#   cluster.sh reset I | refuse I         reset connections / refuse them
#   cluster.sh heal I                     end a proxy fault
#
#   cluster.sh clusters K P R [BASEPORT=7201]
#                        K independent Redis Clusters, each of P primaries
#                        with R replicas per primary (K*P*(1+R) nodes on
#                        BASEPORT..), made with redis-cli --cluster create
#                        (P >= 3; smaller ones with CLUSTER ADDSLOTSRANGE,
#                        MEET and REPLICATE, which redis-cli refuses);
#                        cluster-node-timeout 2000 ms. Then: down, status,
#                        addrs (one redis+cluster:// per cluster, the others
#                        as ?seed=), pause|resume|kill|restart I (node I),
#                        primary C (the node that serves cluster C's slot
#                        0), failover I (promote replica I now: CLUSTER
#                        FAILOVER TAKEOVER).
#
# With the fault proxy (tools/redlock-faultproxy, built in ../build, or
# $REDLOCK_FAULTPROXY), clients use the proxy ports BASEPORT.. and the
# masters listen on BASEPORT+100..; the control port is BASEPORT+99.
# Without it (or REDLOCK_NO_PROXY=1) clients talk to the masters directly
# and the proxy commands are refused.
#
# State (pids, logs, N, base port) lives in $REDLOCK_CLUSTER_DIR, default
# ${TMPDIR:-/tmp}/redlock-cluster-$UID. Masters run with appendonly yes +
# appendfsync always by default (keys survive kill + restart), and addrs
# declares them durable to the clients (redis://127.0.0.1:P?durable=1:
# the restart guard lets a declared durable master's votes count at once;
# this script never changes persistence at run time, which is what the
# declaration promises); REDLOCK_PERSIST=none starts them without
# persistence and addrs declares nothing (a restart loses every key: the
# guard holds a restarted master's votes for the longest ttl in use).
# REDLOCK_TLS=1 makes test certificates (tls-certs.sh, in the state dir)
# and has the masters speak TLS on their client ports (addrs prints
# rediss:// addresses; give clients the CA: REDLOCK_TLS_CA=$(cluster.sh
# tls-ca)); each master also keeps a plain port, its TLS port + 50, for
# admin commands (redis-cli -p ... DEBUG SLEEP, CLIENT PAUSE).
set -euo pipefail

dir=${REDLOCK_CLUSTER_DIR:-${TMPDIR:-/tmp}/redlock-cluster-$(id -u)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
redis=${REDIS_SERVER:-redis-server}

die() { echo "cluster.sh: $*" >&2; exit 1; }

ping_port() {
  timeout 2 redis-cli -h 127.0.0.1 -p "$1" PING 2>/dev/null | grep PONG >/dev/null
}

port_busy() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

load() {
  [ -f "$dir/cluster.env" ] || die "no cluster is up (state dir $dir)"
  # shellcheck disable=SC1091
  . "$dir/cluster.env"
}

check_index() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && [ "$1" -ge 1 ] && [ "$1" -le "$N" ] \
    || die "master index must be 1..$N"
}

pid_of() { cat "$dir/$1.pid" 2>/dev/null || true; }

alive() {
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

mport() {   # the master's own (client-facing) port
  if [ "${PROXY:-0}" = 1 ]; then echo $((BASEPORT + 100 + $1 - 1));
  else echo $((BASEPORT + $1 - 1)); fi
}

aport() {   # where redis-cli reaches it in plain text
  if [ "${TLS:-0}" = 1 ]; then echo $(($(mport "$1") + 50));
  else mport "$1"; fi
}

proxy_cmd() {
  [ "${PROXY:-0}" = 1 ] || die "no fault proxy in this cluster"
  local reply
  exec 3<>"/dev/tcp/127.0.0.1/$((BASEPORT + 99))" || die "proxy not reachable"
  printf '%s\n' "$*" >&3
  read -r -t 5 reply <&3 || reply="ERR no answer"
  exec 3<&- 3>&-
  [[ "$reply" == OK* ]] || die "proxy: $reply"
}

start_one() {
  local i=$1 port persist=() listen cl=()
  port=$(mport "$1")
  if [ "${MODE:-masters}" = clusters ]; then
    # nodes.conf stays across restarts: a node knows its cluster again.
    cl=(--cluster-enabled yes --cluster-config-file nodes.conf
        --cluster-node-timeout 2000)
  fi
  mkdir -p "$dir/$i"
  if [ "${PERSIST:-aof}" = aof ]; then
    persist=(--appendonly yes --appendfsync always)
  else
    persist=(--appendonly no)
  fi
  listen=(--port "$port")
  if [ "${TLS:-0}" = 1 ]; then
    listen=(--port "$(aport "$i")" --tls-port "$port"
            --tls-cert-file "$dir/tls/server.crt"
            --tls-key-file "$dir/tls/server.key"
            --tls-ca-cert-file "$dir/tls/ca.crt" --tls-auth-clients no)
  fi
  "$redis" "${listen[@]}" --bind 127.0.0.1 --save '' "${persist[@]}" \
    "${cl[@]}" --dir "$dir/$i" --daemonize no --enable-debug-command local \
    --protected-mode no >>"$dir/$i.log" 2>&1 &
  echo $! >"$dir/$i.pid"
  local t
  for t in $(seq 1 500); do
    ping_port "$(aport "$i")" && return 0
    alive "$(pid_of "$i")" || break
    sleep 0.02
  done
  tail -5 "$dir/$i.log" >&2 || true
  die "master $i (port $port) did not start"
}

stop_one() {
  local i=$1 pid t
  pid=$(pid_of "$i")
  if alive "$pid"; then
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    for t in $(seq 1 100); do
      alive "$pid" || break
      sleep 0.02
    done
    alive "$pid" && kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/$i.pid"
}

# Nodes of cluster C (1..K): ports of its primaries then its replicas.
cl_first() { echo $(( (($1 - 1) * P * (1 + R)) + 1 )); }
cl_size() { echo $(( P * (1 + R) )); }

rc() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }

# Waits (bounded, 30 s) until every node of cluster C says the cluster is
# ok and knows all its nodes.
cl_wait_ok() {
  local c=$1 first n t i ok info
  first=$(cl_first "$c"); n=$(cl_size)
  for t in $(seq 1 300); do
    ok=1
    for i in $(seq "$first" $((first + n - 1))); do
      info=$(rc "$(mport "$i")" CLUSTER INFO 2>/dev/null | tr -d '\r')
      grep -q '^cluster_state:ok' <<<"$info" || { ok=0; break; }
      [ "$(sed -n 's/^cluster_known_nodes://p' <<<"$info")" = "$n" ] ||
        { ok=0; break; }
    done
    [ "$ok" = 1 ] && return 0
    sleep 0.1
  done
  die "cluster $c did not become ok"
}

# Cluster C by hand (P < 3, which redis-cli --cluster create refuses).
cl_make_by_hand() {
  local c=$1 first j lo hi p0 id t
  first=$(cl_first "$c")
  p0=$(mport "$first")
  for j in $(seq 0 $((P - 1))); do
    lo=$((16384 * j / P)); hi=$((16384 * (j + 1) / P - 1))
    rc "$(mport $((first + j)))" CLUSTER ADDSLOTSRANGE "$lo" "$hi" >/dev/null
  done
  for j in $(seq 1 $((P * (1 + R) - 1))); do
    rc "$(mport $((first + j)))" CLUSTER MEET 127.0.0.1 "$p0" >/dev/null
  done
  for j in $(seq "$P" $((P * (1 + R) - 1))); do
    id=$(rc "$(mport $((first + (j - P) % P)))" CLUSTER MYID)
    for t in $(seq 1 100); do
      rc "$(mport $((first + j)))" CLUSTER REPLICATE "$id" 2>/dev/null |
        grep -q OK && break
      sleep 0.1
    done
  done
}

cmd=${1:-}
case "$cmd" in
  clusters)
    MODE=clusters
    K=${2:-3}; P=${3:-3}; R=${4:-1}; BASEPORT=${5:-7201}
    for v in "$K" "$P" "$R"; do
      [[ "$v" =~ ^[0-9]+$ ]] || die "usage: clusters K P R [BASEPORT]"
    done
    [ "$K" -ge 1 ] && [ "$K" -le 9 ] || die "K must be 1..9"
    [ "$P" -ge 1 ] && [ "$P" -le 16 ] || die "P must be 1..16"
    [ "$R" -le 3 ] || die "R must be 0..3"
    N=$((K * P * (1 + R)))
    [ -f "$dir/cluster.env" ] && die "a cluster is already up in $dir"
    command -v "$redis" >/dev/null || die "redis-server not found"
    command -v redis-cli >/dev/null || die "redis-cli not found"
    for i in $(seq 1 "$N"); do
      port_busy $((BASEPORT + i - 1)) && die "port $((BASEPORT + i - 1)) is in use"
      port_busy $((BASEPORT + i - 1 + 10000)) &&
        die "cluster bus port $((BASEPORT + i - 1 + 10000)) is in use"
    done
    mkdir -p "$dir"
    PERSIST=${REDLOCK_PERSIST:-aof}
    [ "$PERSIST" = aof ] || [ "$PERSIST" = none ] ||
      die "REDLOCK_PERSIST must be aof or none"
    printf 'MODE=clusters\nN=%s\nK=%s\nP=%s\nR=%s\nBASEPORT=%s\nPERSIST=%s\nPROXY=0\nTLS=0\n' \
      "$N" "$K" "$P" "$R" "$BASEPORT" "$PERSIST" >"$dir/cluster.env"
    for i in $(seq 1 "$N"); do start_one "$i"; done
    for c in $(seq 1 "$K"); do
      first=$(cl_first "$c")
      if [ "$P" -ge 3 ]; then
        nodes=()
        for j in $(seq 0 $((P * (1 + R) - 1))); do
          nodes+=("127.0.0.1:$(mport $((first + j)))")
        done
        redis-cli --cluster create "${nodes[@]}" --cluster-replicas "$R" \
          --cluster-yes >>"$dir/create.log" 2>&1 ||
          die "redis-cli --cluster create failed (see $dir/create.log)"
      else
        cl_make_by_hand "$c"
      fi
      cl_wait_ok "$c"
    done
    echo "clusters up: $K clusters of $P primaries with $R replica(s) each, nodes on 127.0.0.1:$BASEPORT-$((BASEPORT + N - 1)) ($PERSIST persistence)" >&2
    ;;
  primary)
    load
    [ "${MODE:-masters}" = clusters ] || die "not a clusters setup"
    [[ "${2:-}" =~ ^[0-9]+$ ]] && [ "$2" -ge 1 ] && [ "$2" -le "$K" ] ||
      die "cluster index must be 1..$K"
    first=$(cl_first "$2")
    for i in $(seq "$first" $((first + $(cl_size) - 1))); do
      alive "$(pid_of "$i")" || continue
      owner=$(rc "$(mport "$i")" CLUSTER NODES 2>/dev/null | tr -d '\r' |
        awk '$3 ~ /master/ && $3 !~ /fail/ {
               for (k = 9; k <= NF; k++) if ($k ~ /^0(-|$)/) {
                 split($2, a, "[:@]"); print a[2] } }' | head -1)
      [ -n "$owner" ] && break
    done
    [ -n "${owner:-}" ] || die "no primary serves slot 0 of cluster $2"
    for i in $(seq "$first" $((first + $(cl_size) - 1))); do
      [ "$(mport "$i")" = "$owner" ] && { echo "$i"; exit 0; }
    done
    die "the primary of slot 0 is not one of ours"
    ;;
  failover)
    load; check_index "${2:-}"
    [ "${MODE:-masters}" = clusters ] || die "not a clusters setup"
    rc "$(mport "$2")" CLUSTER FAILOVER TAKEOVER | grep OK >/dev/null ||
      die "node $2: CLUSTER FAILOVER TAKEOVER refused (a primary?)"
    ;;
  up)
    N=${2:-5}
    BASEPORT=${3:-7101}
    [[ "$N" =~ ^[0-9]+$ ]] && [ "$N" -ge 1 ] && [ "$N" -le 64 ] \
      || die "N must be 1..64"
    [ -f "$dir/cluster.env" ] && die "a cluster is already up in $dir"
    command -v "$redis" >/dev/null || die "redis-server not found"
    fp=${REDLOCK_FAULTPROXY:-$here/../build/tools/redlock-faultproxy}
    PROXY=0
    [ -x "$fp" ] && [ -z "${REDLOCK_NO_PROXY:-}" ] && PROXY=1
    for i in $(seq 1 "$N"); do
      port_busy "$(mport "$i")" && die "port $(mport "$i") is in use"
      [ "$PROXY" = 1 ] && port_busy $((BASEPORT + i - 1)) \
        && die "port $((BASEPORT + i - 1)) is in use"
    done
    mkdir -p "$dir"
    PERSIST=${REDLOCK_PERSIST:-aof}
    [ "$PERSIST" = aof ] || [ "$PERSIST" = none ] ||
      die "REDLOCK_PERSIST must be aof or none"
    TLS=0
    if [ -n "${REDLOCK_TLS:-}" ] && [ "${REDLOCK_TLS}" != 0 ]; then
      TLS=1
      "$here/tls-certs.sh" "$dir/tls" >/dev/null \
        || die "could not make the TLS certificates (openssl)"
    fi
    printf 'N=%s\nBASEPORT=%s\nPERSIST=%s\nPROXY=%s\nTLS=%s\n' "$N" \
      "$BASEPORT" "$PERSIST" "$PROXY" "$TLS" >"$dir/cluster.env"
    for i in $(seq 1 "$N"); do start_one "$i"; done
    if [ "$PROXY" = 1 ]; then
      specs=()
      for i in $(seq 1 "$N"); do
        specs+=("$((BASEPORT + i - 1)):127.0.0.1:$(mport "$i")")
      done
      "$fp" --control $((BASEPORT + 99)) "${specs[@]}" >>"$dir/proxy.log" 2>&1 &
      echo $! >"$dir/proxy.pid"
      for t in $(seq 1 250); do
        port_busy $((BASEPORT + 99)) && break
        sleep 0.02
      done
      port_busy $((BASEPORT + 99)) || die "fault proxy did not start"
    fi
    echo "cluster up: $N masters, clients use 127.0.0.1:$BASEPORT-$((BASEPORT + N - 1)) ($PERSIST persistence, fault proxy: $([ "$PROXY" = 1 ] && echo yes || echo no), TLS: $([ "$TLS" = 1 ] && echo "yes, CA $dir/tls/ca.crt" || echo no))" >&2
    ;;
  down)
    [ -f "$dir/cluster.env" ] || exit 0
    load
    pp=$(cat "$dir/proxy.pid" 2>/dev/null || true)
    if alive "$pp"; then kill -TERM "$pp" 2>/dev/null || true; fi
    for i in $(seq 1 "$N"); do stop_one "$i"; done
    rm -rf "$dir"
    echo "cluster down" >&2
    ;;
  status)
    load
    for i in $(seq 1 "$N"); do
      port=$(aport "$i"); pid=$(pid_of "$i"); state=down
      if alive "$pid"; then
        state=running
        grep -q '^State:.*T' "/proc/$pid/status" 2>/dev/null && state=paused
      fi
      ans=no; [ "$state" = running ] && ping_port "$port" && ans=yes
      if [ "${MODE:-masters}" = clusters ]; then
        role=-
        [ "$ans" = yes ] && role=$(rc "$port" ROLE | head -1)
        printf 'node %d (cluster %d)  127.0.0.1:%d  pid %-7s %-8s %s\n' \
          "$i" $(( (i - 1) / $(cl_size) + 1 )) "$port" "${pid:--}" \
          "$state" "$role"
        continue
      fi
      printf 'master %d  127.0.0.1:%d  pid %-7s %-8s PING %s\n' \
        "$i" "$port" "${pid:--}" "$state" "$ans"
    done
    ;;
  addrs)
    load
    if [ "${MODE:-masters}" = clusters ]; then
      # (Not declared durable: a cluster's nodes are guarded whatever the
      # declaration, since a failover cannot be told from a restart.)
      out=""
      for c in $(seq 1 "$K"); do
        first=$(cl_first "$c")
        uri="redis+cluster://127.0.0.1:$(mport "$first")"
        q=""
        for j in 1 2; do
          [ "$j" -lt "$(cl_size)" ] || continue
          q="${q:+$q&}seed=127.0.0.1:$(mport $((first + j)))"
        done
        out+="${out:+,}$uri${q:+?$q}"
      done
      echo "$out"
      exit 0
    fi
    out=""
    scheme=""
    opts=""
    [ "${TLS:-0}" = 1 ] && scheme="rediss://"
    if [ "$PERSIST" = aof ]; then
      scheme=${scheme:-redis://}
      opts="?durable=1"
    fi
    for i in $(seq 1 "$N"); do
      out+="${out:+,}${scheme}127.0.0.1:$((BASEPORT + i - 1))$opts"
    done
    echo "$out"
    ;;
  tls-ca)
    load
    [ "${TLS:-0}" = 1 ] || die "this cluster is not TLS (REDLOCK_TLS=1 at up)"
    echo "$dir/tls/ca.crt"
    ;;
  pause|resume|kill)
    load; check_index "${2:-}"
    pid=$(pid_of "$2")
    alive "$pid" || die "master $2 is not running"
    case "$cmd" in
      pause) kill -STOP "$pid" ;;
      resume) kill -CONT "$pid" ;;
      kill) kill -CONT "$pid" 2>/dev/null || true; kill -KILL "$pid"
            rm -f "$dir/$2.pid" ;;
    esac
    ;;
  restart)
    load; check_index "${2:-}"
    stop_one "$2"
    start_one "$2"
    ;;
  slow)
    load; check_index "${2:-}"
    [[ "${3:-}" =~ ^[0-9]+$ ]] || die "usage: slow I MS"
    proxy_cmd "$2" latency "$3"
    ;;
  blackhole|reset|refuse)
    load; check_index "${2:-}"
    proxy_cmd "$2" "$cmd"
    ;;
  heal)
    load; check_index "${2:-}"
    proxy_cmd "$2" normal
    ;;
  *)
    sed -n '2,48p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac

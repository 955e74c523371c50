#!/usr/bin/env bash
# drill.sh: the compose kit brought up for real, in containers, with faults
# made by the container engine itself; run by `tools/quickstart.sh drill`
# (and by `quickstart.sh test`, one phase).
#
#   cluster-compose/drill.sh [--keep-images] [--results FILE] [TOPOLOGY...]
#
# TOPOLOGY: plain (docker-compose.yml: 5 masters behind the fault proxy),
# tls (the same with docker-compose.tls.yml on top), cluster
# (docker-compose.cluster.yml: 3 Redis Clusters of 3 primaries + 3
# replicas). Default: all three. For each: up, then the demo's workload
# (build/tools/redlock-demo: workers contend for one lock, the fault is
# made at half time) once per fault, printing the grants before and after
# the fault and the overlaps (two holders at once: must be 0), then down.
# Faults: podman pause/unpause, kill/start, network disconnect/connect of a
# master; the README's toxiproxy recipes (curl lines taken from README.md
# beside this file, run as written) against the proxy; in the clusters, a
# primary killed (its replica takes over) and started again. Two holders
# at once fails the topology at once; any other failure (a bound of the
# engine or of a failover missed on a loaded machine) runs that topology
# once more, and its PASS line says so with the first run's cause.
#
# Engine: podman (rootful: run as root), driven by docker-compose 1.29
# through podman's Docker-compatible API (`podman system service` on a
# socket in the scratch dir, started here and stopped by its PID), both
# from Debian 12 (`quickstart.sh drill` installs them); Docker is not
# needed. Not podman-compose 1.0.3: it cannot start network_mode: host
# services (it adds the project's network too: podman refuses), and it
# appends an override's command to the base file's (the TLS file). Faults
# use podman's own commands (docker-compose's unpause fails against
# podman 4.3). Podman's settings come from a containers.conf of our own
# (CONTAINERS_CONF): runc as the runtime and default ulimits lowered to
# 1024 (podman's default, the host's limit, is refused in these machines'
# containers), netavark for networks (aardvark-dns: the proxy finds the
# masters by service name).
#
# Images: made locally from this machine's binaries (`podman import` of a
# tarball holding redis-server, redis-cli, sh, seq, grep, sleep and the
# libraries ldd names; and one of build/tools/redlock-faultproxy, which
# reads toxiproxy's command line and config and speaks the part of its
# HTTP API the recipes use); no registry is needed. REDIS_IMAGE /
# TOXIPROXY_IMAGE given in the environment are used instead (a real
# toxiproxy, say).
#
# Owns: the compose project redlock-drill-$$ (its containers and network),
# the images tagged with this run, the API service's process, a scratch
# dir with the compose files, certificates, socket and logs. At the end (also on failure or ^C) it removes all
# of them, then checks that podman lists none (containers, pods, networks,
# volumes, images of this run): a leftover fails the drill. --keep-images
# keeps the two images. Does not own: anything else podman runs; it
# refuses to start if the kit's ports are busy (7301-7305, 7311-7315,
# 8474; for the clusters 7201-7218 and their bus ports 17201-17218).
# Every wait is a bounded poll; the whole drill took 72-80 s here (2
# cores), under the 3 minutes the test command allows it.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)
demo=${REDLOCK_DEMO:-$top/build/tools/redlock-demo}
fproxy=${REDLOCK_FAULTPROXY:-$top/build/tools/redlock-faultproxy}

keep_images=0
results=""
topos=()
while [ $# -gt 0 ]; do
  case "$1" in
    --keep-images) keep_images=1 ;;
    --results) results=${2:?--results FILE}; shift ;;
    plain|tls|cluster) topos+=("$1") ;;
    *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
  esac
  shift
done
[ ${#topos[@]} -gt 0 ] || topos=(plain tls cluster)

log() { printf '[drill] %s\n' "$*" >&2; }
nfail=0
result() {   # PASS|FAIL name [why]
  log "$*"
  [ "$1" = PASS ] || nfail=$((nfail + 1))
  [ -z "$results" ] || echo "$1 drill:$2${3:+ $3}" >>"$results"
}
# A topology's run ends with its outcome (PASS, or FAIL and why) and
# whether the workload saw two holders at once (overlap=1).
outcome() { topo_result=$1; topo_why=${2:-}; }
# A check of the running topology failed: the cause goes to the log now
# and, at the end, into the topology's FAIL line (CI shows only a tail).
bad() { ok=0; why="${why:+$why; }$*"; log "$*"; }
die() {
  log "FAILED: $*"
  [ -z "$results" ] || echo "FAIL drill:setup $*" >>"$results"
  exit 1
}

[ "$(id -u)" -eq 0 ] ||
  die "run as root (rootful podman; rootless needs subuid ranges and is not what CI runs)"
for c in podman docker-compose curl redis-cli openssl; do
  command -v "$c" >/dev/null || die "$c not found (tools/quickstart.sh drill installs it)"
done
[ -x "$demo" ] || die "no $demo (tools/quickstart.sh build)"
[ -x "$fproxy" ] || die "no $fproxy (tools/quickstart.sh build)"

run=$$-$(date +%s)
project=redlock-drill-$$
scratch=$(mktemp -d "${TMPDIR:-/tmp}/redlock-drill.XXXXXX")
export CONTAINERS_CONF=$scratch/containers.conf
cat >"$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
[engine]
runtime = "runc"
[network]
network_backend = "netavark"
EOF
redis_img=localhost/redlock-drill-redis:$run
proxy_img=localhost/redlock-drill-proxy:$run
made_images=()
svc_pid=""
t0=$(date +%s)

# Everything this run made, as podman lists it (empty when all is gone).
leftovers() {
  podman ps -a --filter "label=com.docker.compose.project=$project" \
    --format 'container {{.Names}}'
  podman pod ls --filter "label=com.docker.compose.project=$project" \
    --format 'pod {{.Name}}' 2>/dev/null || true
  podman network ls --format '{{.Name}}' | grep "^${project}_" |
    sed 's/^/network /' || true
  podman volume ls --format '{{.Name}}' | grep "^${project}_" |
    sed 's/^/volume /' || true
  if [ "$keep_images" = 0 ]; then
    podman images --filter "label=io.redlock.drill.run=$run" \
      --format 'image {{.Repository}}:{{.Tag}}'
  fi
}

cleanup() {
  local rc=$? left
  set +e
  trap - EXIT INT TERM
  # Unpause first: a paused container is not removed cleanly.
  for c in $(podman ps -a --filter "label=com.docker.compose.project=$project" \
               --filter status=paused --format '{{.Names}}'); do
    podman unpause "$c" >/dev/null 2>&1
  done
  podman ps -a --filter "label=com.docker.compose.project=$project" \
    --format '{{.Names}}' | xargs -r podman rm -f -t 0 >/dev/null 2>&1
  podman network ls --format '{{.Name}}' | grep "^${project}_" |
    xargs -r podman network rm -f >/dev/null 2>&1
  podman volume ls --format '{{.Name}}' | grep "^${project}_" |
    xargs -r podman volume rm -f >/dev/null 2>&1
  if [ "$keep_images" = 0 ] && [ ${#made_images[@]} -gt 0 ]; then
    podman rmi -f "${made_images[@]}" >/dev/null 2>&1
  fi
  left=$(leftovers 2>&1)
  if [ -n "$left" ]; then
    result FAIL leftovers "$(echo "$left" | tr '\n' ',')"
    rc=1
  else
    result PASS leftovers "(no container, pod, network, volume$([ "$keep_images" = 1 ] && echo "; images kept: $redis_img $proxy_img" || echo ", image") of the drill left)"
  fi
  if [ -n "$svc_pid" ] && kill -0 "$svc_pid" 2>/dev/null; then
    kill "$svc_pid" 2>/dev/null
    wait "$svc_pid" 2>/dev/null
  fi
  rm -rf "$scratch"
  log "done in $(( $(date +%s) - t0 )) s"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The image of plain binaries: each in /usr/bin, with the libraries ldd
# names under their own paths (Debian 12's /bin, /lib are links into /usr).
make_image() {   # tag root-dir [--change ...] binaries...
  local tag=$1 root=$2 b l; shift 2
  local changes=()
  while [ "${1:-}" = --change ]; do changes+=(--change "$2"); shift 2; done
  mkdir -p "$root/tmp" "$root/data" "$root/usr/bin"
  chmod 1777 "$root/tmp"
  for b in "$@"; do
    cp -L "$b" "$root/usr/bin/"
    for l in $(ldd "$b" | grep -o '/[^ ]*'); do
      cp -L --parents "$l" "$root/"
    done
  done
  [ -e "$root/bin" ] || ln -s usr/bin "$root/bin"
  [ -e "$root/usr/bin/sh" ] || ln -s dash "$root/usr/bin/sh"
  tar -C "$root" -c . | podman import "${changes[@]}" \
    --change "LABEL=io.redlock.drill.run=$run" - "$tag" >/dev/null 2>&1 ||
    die "podman import of $tag failed"
  made_images+=("$tag")
}

images() {
  if [ -z "${REDIS_IMAGE:-}" ]; then
    # The shell and tools too: the cluster file's create services run
    # sh -c with seq, grep and sleep.
    make_image "$redis_img" "$scratch/redis-root" --change WORKDIR=/data \
      "$(command -v redis-server)" "$(command -v redis-cli)" \
      "$(command -v dash)" "$(command -v seq)" "$(command -v grep)" \
      "$(command -v sleep)"
    REDIS_IMAGE=$redis_img
  fi
  if [ -z "${TOXIPROXY_IMAGE:-}" ]; then
    make_image "$proxy_img" "$scratch/proxy-root" \
      --change 'ENTRYPOINT=["/usr/bin/redlock-faultproxy"]' "$fproxy"
    TOXIPROXY_IMAGE=$proxy_img
  fi
  export REDIS_IMAGE TOXIPROXY_IMAGE
  log "images: $REDIS_IMAGE, $TOXIPROXY_IMAGE"
}

# podman's Docker API on a socket of ours, for docker-compose.
api_service() {
  local t
  podman system service --time=0 "unix://$scratch/podman.sock" \
    >"$scratch/service.log" 2>&1 &
  svc_pid=$!
  for t in $(seq 1 100); do   # bounded: 10 s
    [ -S "$scratch/podman.sock" ] &&
      curl -s --unix-socket "$scratch/podman.sock" http://d/_ping 2>/dev/null |
        grep -q OK && return 0
    kill -0 "$svc_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$scratch/service.log" >&2
  die "podman system service did not answer on its socket"
}

compose() {   # files... -- args...
  local files=() f
  while [ "$1" != -- ]; do files+=(-f "$scratch/kit/$1"); shift; done
  shift
  DOCKER_HOST=unix://$scratch/podman.sock COMPOSE_PROJECT_NAME=$project \
    docker-compose "${files[@]}" "$@" >>"$scratch/compose.log" 2>&1 ||
    { tail -20 "$scratch/compose.log" >&2; return 1; }
}

ctr() { echo "${project}_$1_1"; }   # docker-compose 1.29's container name

wait_ping() {   # port [tls]: bounded poll, 30 s
  local t args=()
  [ "${2:-}" = tls ] && args=(--tls --cacert "$scratch/kit/tls/ca.crt")
  t=$((SECONDS + 30))
  while [ "$SECONDS" -lt "$t" ]; do
    timeout 5 redis-cli -p "$1" "${args[@]}" PING 2>/dev/null |
      grep -q PONG && return 0
    sleep 0.1
  done
  return 1
}

# One run of the demo's workload with a fault at half time (a script run
# by the demo: its lines are the fault and, after a pause, the repair).
# Prints the grants before and after the fault and the overlaps; fails on
# an overlap or when no grant came after the fault.
workload() {   # topology name servers seconds fault-script
  local topo=$1 name=$2 servers=$3 secs=$4 script=$5 out rc=0 g o
  out=$scratch/demo-$topo-$name.log
  "$demo" --servers "$servers" --workers 4 --seconds "$secs" \
    --kill-cmd "sh $script" >"$out" 2>&1 || rc=$?
  g=$(sed -n 's/^grants: \([0-9]*\) (before the kill: \([0-9]*\), after: \([0-9]*\))/\1 \2 \3/p' "$out")
  o=$(sed -n 's/^overlaps (two holders at once): \([0-9]*\)/\1/p' "$out")
  set -- $g
  printf '[drill] %-7s %-26s grants before the fault %5s, after %5s; overlaps %s\n' \
    "$topo" "$name" "${2:-?}" "${3:-?}" "${o:-?}" >&2
  case "${o:-0}" in 0) ;; *) overlap=1 ;; esac
  if [ "$rc" -ne 0 ] || [ "${o:-x}" != 0 ]; then
    bad "$name: $(grep -E '^(RESULT|grants|overlaps)' "$out" | tr '\n' ' ')"
    grep -v '^  worker' "$out" | tail -15 >&2
    return 1
  fi
}

fault_script() {   # name lines...: a script in the scratch dir
  local f=$scratch/fault-$1.sh; shift
  printf '%s\n' 'set -e' "export CONTAINERS_CONF=$CONTAINERS_CONF" "$@" >"$f"
  echo "$f"
}

# The README's recipe for a fault, as written there (the containers'
# column of the fault table), with redis2 as the master.
recipe() {   # the fault's words in the table's first column
  local line
  line=$(grep -F "| $1" "$here/README.md" | head -1 | awk -F'|' '{print $3}' |
         sed 's/^ *`//; s/` *$//')
  [ -n "$line" ] || { log "no recipe for '$1' in README.md"; return 1; }
  echo "$line"
}

kit_ports() {
  local p
  for p in 7301 7302 7303 7304 7305 7311 7312 7313 7314 7315 8474; do
    port_busy "$p" && die "port $p is in use (the compose kit's)"
  done
  return 0
}

drill_masters() {   # plain|tls
  local topo=$1 files=(docker-compose.yml) servers="" i tls="" s
  kit_ports
  if [ "$topo" = tls ]; then
    (cd "$scratch/kit" && ./tls-certs.sh tls >/dev/null) ||
      { outcome FAIL "tls-certs.sh failed"; return 0; }
    files+=(docker-compose.tls.yml)
    export REDLOCK_TLS_CA=$scratch/kit/tls/ca.crt
    tls=tls
  fi
  s=$(date +%s)
  if ! compose "${files[@]}" -- up -d; then
    compose "${files[@]}" -- down || true
    outcome FAIL "docker-compose up failed"; return 0
  fi
  for i in 1 2 3 4 5; do
    # admin ports in plain text; the proxy's in TLS when tls
    if ! wait_ping $((7310 + i)) || ! wait_ping $((7300 + i)) $tls; then
      outcome FAIL "master $i not reachable through the proxy in 30 s"
      compose "${files[@]}" -- down || true
      return 0
    fi
    if [ "$tls" = tls ]; then
      servers+="${servers:+,}rediss://127.0.0.1:$((7300 + i))?durable=1"
    else
      servers+="${servers:+,}redis://127.0.0.1:$((7300 + i))?durable=1"
    fi
  done
  log "$topo: up in $(( $(date +%s) - s )) s (5 masters, fault proxy on 8474)"
  local ok=1 f why=""
  f=$(fault_script pause "podman pause $(ctr redis2)" "sleep 1.5" \
      "podman unpause $(ctr redis2)")
  workload "$topo" "pause redis2 1.5 s" "$servers" 4 "$f" || true
  f=$(fault_script kill "podman kill $(ctr redis3)" "sleep 0.5" \
      "podman start $(ctr redis3)")
  workload "$topo" "kill + start redis3" "$servers" 4 "$f" || true
  wait_ping 7303 $tls || bad "redis3 not back in 30 s"
  if [ "$topo" = plain ]; then
    f=$(fault_script disconnect \
        "podman network disconnect ${project}_redlock $(ctr redis4)" \
        "sleep 1.5" \
        "podman network connect --alias redis4 ${project}_redlock $(ctr redis4)")
    workload "$topo" "network disconnect redis4" "$servers" 4 "$f" || true
    # The four proxy recipes of the README, one after another on redis2,
    # then its "end a proxy fault".
    # Each recipe's effect is read back (GET /proxies/redis2) and checked.
    local r line lines=() seen=$scratch/recipes.log
    for r in "latency" "lost replies" "connection reset" "refused" \
             "end a proxy fault"; do
      line=$(recipe "$r") || { bad "no recipe for $r"; continue; }
      lines+=("$line" "curl -s 127.0.0.1:8474/proxies/redis2 >>$seen"
              "echo >>$seen" "sleep 0.6")
    done
    f=$(fault_script recipes "${lines[@]}")
    workload "$topo" "README proxy recipes" "$servers" 6 "$f" || true
    if ! { sed -n 1p "$seen" | grep -q '"type":"latency"' &&
           sed -n 2p "$seen" | grep -q '"type":"timeout"' &&
           sed -n 3p "$seen" | grep -q '"type":"reset_peer"' &&
           sed -n 4p "$seen" | grep -q '"enabled":false' &&
           sed -n 5p "$seen" | grep -q '"enabled":true,"toxics":\[\]'; }; then
      log "the proxy did not show each recipe's fault in turn:"
      cat "$seen" >&2 2>/dev/null || true
      bad "a proxy recipe did not take effect"
    else
      log "$topo: the README's five proxy recipes (latency, lost replies, reset, refused, end) each took effect"
    fi
  fi
  wait_ping 7302 $tls || bad "redis2 not back through the proxy in 30 s"
  s=$(date +%s)
  compose "${files[@]}" -- down || bad "docker-compose down failed"
  log "$topo: down in $(( $(date +%s) - s )) s"
  if [ "$ok" = 1 ]; then outcome PASS; else outcome FAIL "$why"; fi
}

# The primary serving slot 0, as the node on port P sees it.
slot0_awk='$3 ~ /master/ && $3 !~ /fail/ { for (k = 9; k <= NF; k++)
  if ($k ~ /^0(-|$)/) { split($2, a, "[:@]"); print a[2] } }'
slot0_primary() {
  redis-cli -p "$1" CLUSTER NODES 2>/dev/null | tr -d '\r' |
    awk "$slot0_awk" | head -1
}

# Bounded (30 s): every replica of the cluster on ports P..P+5 has its
# link to its primary up (a replica that has not synced yet is not
# eligible for a failover).
replicas_synced() {
  local p t=$((SECONDS + 30)) n
  while [ "$SECONDS" -lt "$t" ]; do
    n=0
    for p in $(seq "$1" $(($1 + 5))); do
      redis-cli -p "$p" INFO replication 2>/dev/null | tr -d '\r' |
        grep -qE '^role:master|^master_link_status:up' && n=$((n + 1))
    done
    [ "$n" = 6 ] && return 0
    sleep 0.1
  done
  return 1
}

drill_cluster() {
  local p c ok=1 s servers f primary node t n other why=""
  for p in $(seq 7201 7218); do
    port_busy "$p" && die "port $p is in use (the cluster file's)"
    port_busy $((p + 10000)) && die "port $((p + 10000)) is in use (a cluster bus port)"
  done
  s=$(date +%s)
  if ! compose docker-compose.cluster.yml -- up -d; then
    compose docker-compose.cluster.yml -- down || true
    outcome FAIL "docker-compose up failed"; return 0
  fi
  # bounded: 60 s for the three create services and every node to agree
  for c in 7201 7207 7213; do
    t=$((SECONDS + 60))
    while [ "$SECONDS" -lt "$t" ]; do
      n=0
      for p in $(seq "$c" $((c + 5))); do
        redis-cli -p "$p" CLUSTER INFO 2>/dev/null |
          grep -q '^cluster_state:ok' && n=$((n + 1))
      done
      [ "$n" = 6 ] && break
      sleep 0.1
    done
    [ "$n" = 6 ] || bad "cluster at $c not ok in 60 s"
  done
  log "cluster: up in $(( $(date +%s) - s )) s (3 clusters, 18 nodes)"
  servers='redis+cluster://127.0.0.1:7201?seed=127.0.0.1:7202,redis+cluster://127.0.0.1:7207?seed=127.0.0.1:7208,redis+cluster://127.0.0.1:7213?seed=127.0.0.1:7214'
  if [ "$ok" = 1 ]; then
    primary=$(slot0_primary 7207)
    node=$((primary - 7200))
    replicas_synced 7207 || bad "replicas of 7207-7212 not synced in 30 s"
    # Down until another node serves slot 0 (its replica is promoted after
    # the node timeout, 2 s, and an election; bounded: 20 s), then started
    # again: it comes back as a replica.
    printf '%s\n' "$slot0_awk" >"$scratch/slot0.awk"
    other=$((primary == 7207 ? 7208 : 7207))
    f=$(fault_script failover "podman kill $(ctr node$node)" \
        "i=0; while [ \$i -lt 200 ]; do p=\$(redis-cli -p $other CLUSTER NODES | tr -d '\\r' | awk -f $scratch/slot0.awk | head -1); [ -n \"\$p\" ] && [ \"\$p\" != $primary ] && break; i=\$((i + 1)); sleep 0.1; done" \
        "podman start $(ctr node$node)")
    workload cluster "kill primary node$node" "$servers" 10 "$f" || true
    wait_ping "$primary" || bad "node$node not back in 30 s"
    p=$(slot0_primary "$primary")
    if [ -n "$p" ] && [ "$p" != "$primary" ]; then
      log "cluster: failover seen: slot 0 of the second cluster moved from $primary to $p"
    else
      bad "no failover: slot 0 still on ${p:-nobody} (was $primary)"
    fi
  fi
  s=$(date +%s)
  compose docker-compose.cluster.yml -- down || bad "docker-compose down failed"
  log "cluster: down in $(( $(date +%s) - s )) s"
  if [ "$ok" = 1 ]; then outcome PASS; else outcome FAIL "$why"; fi
}

log "podman $(podman version --format '{{.Client.Version}}'), $(docker-compose version --short 2>/dev/null | sed 's/^/docker-compose /'), $(runc --version | head -1)"
mkdir -p "$scratch/kit"
cp "$here"/docker-compose*.yml "$here"/toxiproxy*.json "$here"/tls-certs.sh \
  "$scratch/kit/"
images
api_service
# A topology that fails for another cause than two holders at once
# (a failover slower than its bound, a container that did not come back:
# the machine's load, CI runs the drill beside its other suites) runs
# once more, and says so; two holders at once fails at once.
drill_topo() {   # topology
  overlap=0
  case "$1" in
    plain|tls) drill_masters "$1" ;;
    cluster) drill_cluster ;;
  esac
}
for topo in "${topos[@]}"; do
  drill_topo "$topo"
  if [ "$topo_result" = FAIL ] && [ "$overlap" = 0 ]; then
    first=$topo_why
    log "$topo failed ($first), not by an overlap: once more"
    drill_topo "$topo"
    if [ "$topo_result" = PASS ]; then
      result PASS "$topo" "(on the second run; the first: $first)"
    else
      result FAIL "$topo" "(twice; the first: $first; the second: $topo_why)"
    fi
  else
    result "$topo_result" "$topo" "${topo_why:+($topo_why)}"
  fi
done
# cleanup (the EXIT trap) removes the images and checks for leftovers
[ "$nfail" = 0 ]

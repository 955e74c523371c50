# cluster-up.sh: sourced by the bench scripts (failover.sh, scale.sh,
# faults.sh). Takes OUT_DIR as $1 of the caller and, from the caller:
#   bench_name  names the cluster's temporary directory
#   bench_port  the first port, unless BASEPORT is set
#   bench_proxy 1: masters behind the fault proxy (faults.sh), else none
# Sets here, build, out (created, absolute), cluster, servers; starts 5
# masters without persistence (cluster-compose/cluster.sh) and stops them
# by PID when the caller exits, whatever happens. bench_node_deps installs
# the pinned node packages into bench/node/node_modules once.
out=${1:?usage: $(basename "$0") OUT_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD:-$here/build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [ "${bench_proxy:-0}" = 1 ]; then
  export REDLOCK_FAULTPROXY=${REDLOCK_FAULTPROXY:-$build/tools/redlock-faultproxy}
  unset REDLOCK_NO_PROXY
else
  export REDLOCK_NO_PROXY=1
fi
export REDLOCK_CLUSTER_DIR
REDLOCK_CLUSTER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/redlock-$bench_name.XXXXXX")
rmdir "$REDLOCK_CLUSTER_DIR"
cluster="$here/cluster-compose/cluster.sh"
trap 'bash "$cluster" down >/dev/null 2>&1 || true' EXIT
REDLOCK_PERSIST=none bash "$cluster" up 5 "${BASEPORT:-$bench_port}"
servers=$(bash "$cluster" addrs)

bench_node_deps() {
  if [ ! -d "$here/bench/node/node_modules/redlock" ] ||
     [ ! -d "$here/bench/node/node_modules/redis-semaphore" ]; then
    (cd "$here/bench/node" &&
     npm install --no-package-lock --no-audit --no-fund >/dev/null)
  fi
}

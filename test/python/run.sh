#!/usr/bin/env bash
# run.sh SRCDIR BUILDDIR [PYTEST ARGS...]: the python suite (meson test
# --suite python). As a user would: a venv with Debian's site packages
# (python3-pytest, python3-redis), the package installed into it from
# bindings/python with no download (its own backend needs nothing)
#   python3 -m venv --system-site-packages VENV
#   VENV/bin/pip install --no-index ./bindings/python
# then pytest on test/python against the build's libredlock.so
# (REDLOCK_LIBRARY) and CLI (also an ASan build's: see below). node-redlock for the mixed-fleet test comes
# from npm into bench/node/node_modules, once, as the benchmarks do.
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
shift 2
# Debian's interpreter: its dist-packages hold pytest and redis (a python3
# earlier on PATH, e.g. pyenv's, does not see them).
py=${REDLOCK_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=$(command -v python3)
for m in pytest redis venv; do
  "$py" -c "import $m" 2>/dev/null || {
    echo "run.sh: $py cannot import $m (apt-get install python3-pytest" \
         "python3-redis python3-venv; tools/quickstart.sh test does)" >&2
    exit 1
  }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/redlock-python.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$py" -m venv --system-site-packages "$work/venv"
# A private copy, so that parallel runs do not collide (the backend writes
# nothing into it: test_install.py).
cp -r "$src/bindings/python" "$work/pkg"
rm -rf "$work/pkg/build" "$work/pkg"/src/*.egg-info
# PIP_* from the machine (find-links, index) must not matter: no index.
env -u PIP_FIND_LINKS -u PIP_INDEX_URL -u PIP_EXTRA_INDEX_URL \
  "$work/venv/bin/pip" install --quiet --no-index \
  --disable-pip-version-check "$work/pkg" >"$work/pip.log" 2>&1 ||
  { cat "$work/pip.log" >&2; echo "run.sh: pip install failed" >&2; exit 1; }
if [ ! -d "$src/bench/node/node_modules/redlock" ]; then
  (cd "$src/bench/node" &&
   npm install --no-package-lock --no-audit --no-fund >"$work/npm.log" 2>&1) ||
    { cat "$work/npm.log" >&2; echo "run.sh: npm install failed" >&2;
      exit 1; }
fi
export REDLOCK_LIBRARY=$build/lib/libredlock.so
# An ASan+UBSan build (quickstart's build-asan): the sanitizer's runtime
# must be loaded first, so it is preloaded into the Python processes
# (support.spawn keeps it out of redis-server and node). Python's own
# allocations are not LeakSanitizer's business: leaks are off here; ASan
# still stops the process at the first memory error.
if ldd "$REDLOCK_LIBRARY" 2>/dev/null | grep libasan >/dev/null; then
  export LD_PRELOAD=$(${CC:-cc} -print-file-name=libasan.so)
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  echo "run.sh: ASan build: $LD_PRELOAD preloaded into Python"
fi
export REDLOCK_CLI=$build/tools/redlock
export REDLOCK_SRC=$src REDLOCK_BUILD=$build
export PYTHONDONTWRITEBYTECODE=1
unset REDLOCK_SERVERS REDLOCK_PASSWORD REDLOCK_PASSWORD_FILE
# From the tests' directory: extra arguments name test files or -k.
cd "$src/test/python"
# REDLOCK_PYTEST_K: a -k expression (test/mutants.py: a mutant's tests).
if [ -n "${REDLOCK_PYTEST_K:-}" ]; then
  set -- "$@" -k "$REDLOCK_PYTEST_K"
fi
# fd 3: the real stderr, for the stacks of a test past its deadline
# (conftest.py), which pytest's capture of fd 2 would swallow.
"$work/venv/bin/python" -m pytest -p no:cacheprovider -rs "$@" 3>&2

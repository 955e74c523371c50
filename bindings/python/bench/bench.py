#!/usr/bin/env python3
"""bench.py: acquire+release latency from Python, against the C library
itself and against redis-py's Lock, in the same run (docs/PERFORMANCE.md,
"Python binding").

  bench.py [--build BUILD] [--iters 2000] [--rounds 5]

Starts its own masters on loopback (N=1 and N=5, no persistence, pinned to
CPU 0 like the peers harness; stopped by PID at the end), and measures,
interleaved round by round so that drift spreads over all of them:
  c-sync      the C blocking API (sync_cycle.c, compiled here)
  libredlock  this package: `lock.acquire(); lock.release()` on a
              client.lock(key, ttl=10, wait=0) (auto-extension on, as C)
  redis-py    redis.Redis(...).lock(key, timeout=10): acquire(blocking=
              False) + release (N=1 only: it is a single-instance lock)
  c-sync+gap  the C blocking API with a busy wait between acquire and
              release as long as the binding's own time per cycle (below)
Each sample is one cycle on a fresh key. Prints p50/p99 per row, and the
binding's own time per call: an instrumented pass times the two foreign
calls of each cycle (perf_counter_ns around them); the rest of the cycle,
halved, is what the binding adds per call in this process (argument
checks, the gate, the lost-signal registration, ctypes' conversions).
The end-to-end difference to c-sync is printed too: it also holds the
C library's own reaction to a caller that takes a few us between two calls
(its loop thread goes idle and must be woken: c-sync+gap shows that part).
Needs: libredlock importable (PYTHONPATH or installed), REDLOCK_LIBRARY or
--build, python3-redis, cc, taskset.
"""
import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_masters(n, workdir, procs):
    addrs = []
    for i in range(n):
        d = tempfile.mkdtemp(prefix=f"m{i}-", dir=workdir)
        for _ in range(5):
            port = free_port()
            p = subprocess.Popen(
                taskset("0") + ["redis-server", "--port", str(port),
                 "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", d, "--protected-mode", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)
            procs.append(p)
            end = time.monotonic() + 5
            ok = False
            while time.monotonic() < end and p.poll() is None:
                try:
                    socket.create_connection(("127.0.0.1", port), 0.2).close()
                    ok = True
                    break
                except OSError:
                    time.sleep(0.01)
            if ok:
                addrs.append(f"127.0.0.1:{port}")
                break
        else:
            sys.exit("redis-server did not start")
    return addrs


PIN = "split"


def taskset(cpu):
    return ["taskset", "-c", cpu] if PIN == "split" else []


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run_c(exe, addrs, iters, warmup, gap_ns=0):
    out = subprocess.run(taskset("1") + [exe, ",".join(addrs),
                          str(iters), str(warmup), str(gap_ns)], check=True,
                         capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


def run_py(libredlock, addrs, iters, warmup, tag):
    c = libredlock.Client(addrs, restart_guard=-1)
    try:
        out = []
        for i in range(-warmup, iters):
            lock = c.lock(f"bench:py:{tag}:{i}", ttl=10, wait=0)
            t0 = time.perf_counter_ns()
            lock.acquire()
            lock.release()
            t1 = time.perf_counter_ns()
            if i >= 0:
                out.append(t1 - t0)
        return out
    finally:
        c.close()


def binding_time(libredlock, addrs, iters, warmup, tag):
    """Per cycle: the time outside the two foreign calls (ns), and inside."""
    c = libredlock.Client(addrs, restart_guard=-1)
    f = c._f
    inside = []
    real = (f.redlock_sync_acquire, f.redlock_sync_release)

    class Timed:
        def __init__(self, fn):
            self.fn = fn

        def __call__(self, *args):
            t0 = time.perf_counter_ns()
            r = self.fn(*args)
            inside.append(time.perf_counter_ns() - t0)
            return r
    f.redlock_sync_acquire, f.redlock_sync_release = map(Timed, real)
    try:
        out = []
        for i in range(-warmup, iters):
            lock = c.lock(f"bench:bt:{tag}:{i}", ttl=10, wait=0)
            del inside[:]
            t0 = time.perf_counter_ns()
            lock.acquire()
            lock.release()
            t1 = time.perf_counter_ns()
            if i >= 0:
                out.append((t1 - t0 - sum(inside), sum(inside)))
        return out
    finally:
        f.redlock_sync_acquire, f.redlock_sync_release = real
        c.close()


def run_redispy(redis, addr, iters, warmup, tag):
    host, port = addr.split(":")
    r = redis.Redis(host=host, port=int(port))
    out = []
    for i in range(-warmup, iters):
        lock = r.lock(f"bench:rp:{tag}:{i}", timeout=10)
        t0 = time.perf_counter_ns()
        if not lock.acquire(blocking=False):
            raise RuntimeError("redis-py: not acquired")
        lock.release()
        t1 = time.perf_counter_ns()
        if i >= 0:
            out.append(t1 - t0)
    r.close()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pin", choices=("split", "none"), default="split",
                    help="split: masters on CPU 0, client on CPU 1 (the "
                    "peers harness's PIN=split); none: no pinning")
    a = ap.parse_args()
    global PIN
    PIN = a.pin
    os.environ.setdefault("REDLOCK_LIBRARY",
                          os.path.join(a.build, "lib", "libredlock.so"))
    import libredlock
    import redis
    # This process is the client: CPU 1, as the C program.
    if PIN == "split":
        os.sched_setaffinity(0, {1})
    work = tempfile.mkdtemp(prefix="redlock-pybench.")
    procs = []
    try:
        exe = os.path.join(work, "sync_cycle")
        libdir = os.path.dirname(os.path.realpath(
            os.environ["REDLOCK_LIBRARY"]))
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-std=c11",
                        os.path.join(HERE, "sync_cycle.c"), "-I",
                        os.path.join(ROOT, "include"), "-o", exe,
                        os.path.join(libdir, "libredlock.so"),
                        "-Wl,-rpath," + libdir], check=True)
        rows = []
        own = {}
        for n in (1, 5):
            addrs = start_masters(n, work, procs)
            bt = binding_time(libredlock, addrs, a.iters, a.warmup, n)
            gap = int(pct([o for o, _ in bt], 0.5))
            own[n] = (pct([o for o, _ in bt], 0.5) / 2e3,
                      pct([o for o, _ in bt], 0.99) / 2e3)
            samples = {"c-sync": [], "c-sync+gap": [], "libredlock": []}
            if n == 1:
                samples["redis-py"] = []
            for rnd in range(a.rounds):
                it = a.iters // a.rounds
                samples["c-sync"] += run_c(exe, addrs, it, a.warmup)
                samples["c-sync+gap"] += run_c(exe, addrs, it, a.warmup, gap)
                samples["libredlock"] += run_py(libredlock, addrs, it,
                                                a.warmup, f"{n}.{rnd}")
                if n == 1:
                    samples["redis-py"] += run_redispy(redis, addrs[0], it,
                                                       a.warmup,
                                                       f"{n}.{rnd}")
            for impl, xs in samples.items():
                rows.append((n, impl, pct(xs, 0.5) / 1e3, pct(xs, 0.99) / 1e3,
                             statistics.fmean(xs) / 1e3, len(xs)))
        print(f"pin={PIN}")
        print(f"{'N':>2} {'impl':<11} {'p50 us':>8} {'p99 us':>8} "
              f"{'mean us':>8} {'cycles':>6}")
        for n, impl, p50, p99, mean, k in rows:
            print(f"{n:>2} {impl:<11} {p50:8.1f} {p99:8.1f} {mean:8.1f} "
                  f"{k:6d}")
        for n in (1, 5):
            c = next(r for r in rows if r[0] == n and r[1] == "c-sync")
            p = next(r for r in rows if r[0] == n and r[1] == "libredlock")
            print(f"N={n}: the binding's own time per call: p50 "
                  f"{own[n][0]:.1f} us, p99 {own[n][1]:.1f} us; end to end "
                  f"vs c-sync (p50): {(p[2] - c[2]) / 2:+.1f} us per call")
        print(f"redis-server {subprocess.run(['redis-server', '--version'], capture_output=True, text=True).stdout.split()[2]}, "
              f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

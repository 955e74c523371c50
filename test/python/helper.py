"""Programs the tests run as separate processes (sys.executable helper.py
MODE ...), each using the installed package.

  leader SERVERS NAME ID TTL   campaign, print "leading", wait for stdin EOF
  hold SERVERS NAME TTL        hold a lock, print its token, exit without
                               releasing (the client's atexit close does)
  fleet SERVERS KEY LOG SECONDS THREADS
                               mixed-fleet worker: THREADS threads on one
                               client contend for KEY until SECONDS pass
  cli-fleet CLI SERVERS KEY LOG SECONDS
                               the same through `redlock run`, one process
                               per grant
  record LOG IMPL              run by `redlock run`: one grant's interval

Mixed-fleet log lines (appended with O_APPEND, one write each):
  IMPL START_NS END_NS FENCE   (CLOCK_MONOTONIC; FENCE "-" when none)
"""
import os
import random
import subprocess
import sys
import threading
import time

import libredlock


def main():
    mode = sys.argv[1]
    if mode == "record":
        record(sys.argv[2], sys.argv[3])
        return
    if mode == "cli-fleet":
        cli_fleet(sys.argv[2], sys.argv[3].split(","), *sys.argv[4:])
        return
    servers = sys.argv[2].split(",")
    if mode == "leader":
        name, ident, ttl = sys.argv[3], sys.argv[4], float(sys.argv[5])
        c = libredlock.Client(servers, restart_guard=-1,
                              command_timeout=0.5)
        e = c.campaign(name, id=ident, ttl=ttl, wait=30)
        print("leading", flush=True)
        sys.stdin.read()   # until the test kills us or closes stdin
        e.resign()
        c.close()
    elif mode == "hold":
        name, ttl = sys.argv[3], float(sys.argv[4])
        c = libredlock.Client(servers, restart_guard=-1,
                              command_timeout=0.5)
        lock = c.lock(name, ttl=ttl).acquire()
        print(lock.token, flush=True)
        # Exits holding it: neither release() nor close() is called.
        globals()["kept"] = (c, lock)
    elif mode == "fleet":
        fleet(servers, *sys.argv[3:])
    else:
        sys.exit(f"unknown mode {mode}")


def append(log, line):
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def fleet(servers, key, log, seconds, threads):
    """Python workers: every grant's interval [acquired, work done],
    cut at the validity it had when acquired if the lock was lost."""
    c = libredlock.Client(servers, durable=True, command_timeout=0.1,
                          connect_timeout=0.5)
    end = time.monotonic() + float(seconds)
    counts = []

    def worker():
        n = 0
        rnd = random.Random()
        while time.monotonic() < end:
            try:
                with c.lock(key, ttl=2, wait=0.5, fence=True) as lock:
                    t0 = time.monotonic_ns()
                    v0 = lock.validity
                    fence = lock.fence
                    time.sleep(rnd.uniform(0.005, 0.015))
                    t1 = time.monotonic_ns()
                    if lock.lost.is_set() or lock.validity <= 0:
                        t1 = min(t1, t0 + int(v0 * 1e9))
                    append(log, f"python {t0} {t1} {fence}\n")
                    n += 1
            except libredlock.Lost:
                pass   # its interval was cut above
            except (libredlock.LockTaken, libredlock.NoQuorum,
                    libredlock.WaitTimeout):
                pass
            time.sleep(rnd.uniform(0.005, 0.015))
        counts.append(n)

    ths = [threading.Thread(target=worker) for _ in range(int(threads))]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    c.close()
    print("python grants", sum(counts), flush=True)


def cli_fleet(cli, servers, key, log, seconds):
    """`redlock run --fence KEY -- python helper.py record LOG cli`, one
    process per grant, until SECONDS pass."""
    env = dict(os.environ, REDLOCK_SERVERS=",".join(servers),
               REDLOCK_DURABLE="1")
    end = time.monotonic() + float(seconds)
    rnd = random.Random()
    grants = 0
    setpriv = ["setpriv", "--pdeathsig", "KILL", "--"]
    while time.monotonic() < end:
        r = subprocess.run(
            setpriv + [cli, "run", "-q", "--ttl", "2s", "--wait", "500ms",
                       "--command-timeout", "100ms", "--fence", key, "--",
                       sys.executable, os.path.abspath(__file__), "record",
                       log, "cli"], env=env, timeout=60,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        grants += r.returncode == 0
        time.sleep(rnd.uniform(0.005, 0.015))
    print("cli grants", grants, flush=True)


def record(log, impl):
    t0 = time.monotonic_ns()
    time.sleep(random.uniform(0.005, 0.015))
    t1 = time.monotonic_ns()
    append(log, f"{impl} {t0} {t1} {os.environ.get('REDLOCK_FENCE', '-')}\n")


if __name__ == "__main__":
    main()

"""A mixed fleet on one key: Python processes (this package), C CLI
processes (`redlock run`) and node-redlock processes contend for one lock
on 5 masters while minority faults are injected (SIGSTOP, CLIENT PAUSE,
DEBUG SLEEP, kill -9 and restart); never two holders at once.

The checker (the safety tests' idea, in Python): every holder appends
[start, end] of each grant, on CLOCK_MONOTONIC of this machine, to one
log file (one O_APPEND write per line); sorted by start, no interval may
begin before every earlier one ended. The redlock holders (Python and the
CLI) also record their fencing token: in start order the tokens strictly
increase across both implementations.

The masters run appendonly + appendfsync always (a restart loses no key:
node-redlock has no restart guard, docs/GUARANTEES.md "Mixed fleets"), declared durable
to the redlock clients. FLEET_SECONDS (20) sets the length.
"""
import os
import random
import subprocess
import sys
import time

import support

HERE = os.path.dirname(os.path.abspath(__file__))
SECONDS = float(os.environ.get("FLEET_SECONDS", "20"))


def parse(path):
    out = []
    with open(path) as f:
        for line in f:
            impl, start, end, fence = line.split()
            out.append((int(start), int(end), impl,
                        None if fence in ("-", "None") else int(fence)))
    return out


def overlaps(intervals):
    """Pairs (earlier, later) where later starts before earlier ended."""
    bad = []
    latest = None   # the interval that ends last among those started
    for iv in sorted(intervals):
        if latest is not None and iv[0] < latest[1]:
            bad.append((latest, iv))
        if latest is None or iv[1] > latest[1]:
            latest = iv
    return bad


def fence_inversions(intervals):
    fenced = [iv for iv in sorted(intervals) if iv[3] is not None]
    return [(a, b) for a, b in zip(fenced, fenced[1:]) if b[3] <= a[3]]


def test_checker_catches_overlaps():
    """The checker itself can fail: overlaps (also one nested in a long
    earlier grant) and fences out of order."""
    ok = [(0, 10, "a", 1), (10, 20, "b", None), (25, 30, "c", 5)]
    assert overlaps(ok) == [] and fence_inversions(ok) == []
    assert overlaps([(0, 10, "a", 1), (5, 12, "b", 2)])
    assert overlaps([(0, 100, "a", 1), (20, 30, "b", 2), (40, 50, "c", 3)])
    assert len(overlaps([(0, 100, "a", 1), (20, 30, "b", 2),
                         (40, 50, "c", 3)])) == 2
    assert fence_inversions([(0, 1, "a", 5), (2, 3, "b", 4)])
    assert fence_inversions([(0, 1, "a", 5), (2, 3, "b", 5)])


def fault_loop(masters, seconds, log):
    """Minority faults only: one or two of the five masters at a time."""
    rnd = random.Random()
    end = time.monotonic() + seconds
    counts = {}
    while time.monotonic() < end:
        ms = rnd.sample(list(masters), rnd.choice((1, 2)))
        kind = rnd.choice(("stop", "client-pause", "debug-sleep",
                           "restart"))
        counts[kind] = counts.get(kind, 0) + 1
        if kind == "stop":
            for m in ms:
                m.pause()
            time.sleep(rnd.uniform(0.2, 0.8))
            for m in ms:
                m.resume()
        elif kind == "client-pause":
            for m in ms:
                m.cmd("CLIENT", "PAUSE", rnd.randrange(200, 800))
            time.sleep(0.8)
        elif kind == "debug-sleep":
            for m in ms:   # one at a time: the call blocks for its sleep
                m.cmd("DEBUG", "SLEEP", "0.3", timeout=5)
        else:
            for m in ms:
                m.restart()
        time.sleep(rnd.uniform(0.1, 0.4))
    log.write(f"faults: {counts}\n")
    return counts


def test_mixed_fleet(make_masters, workdir, cli):
    bench_node = os.path.join(os.environ["REDLOCK_SRC"], "bench", "node")
    assert os.path.isdir(os.path.join(bench_node, "node_modules",
                                      "redlock")), \
        "node-redlock is not installed in bench/node (run.sh installs it)"
    masters = make_masters(5, durable=True)
    addrs = ",".join(masters.addrs)
    key = "fleet-key"
    log = os.path.join(workdir, "fleet.log")
    helper = os.path.join(HERE, "helper.py")
    procs = []
    try:
        for _ in range(2):
            procs.append(support.spawn(
                [sys.executable, helper, "fleet", addrs, key, log,
                 str(SECONDS), "2"], stdout=subprocess.PIPE, text=True))
            procs.append(support.spawn(
                [sys.executable, helper, "cli-fleet", cli, addrs, key, log,
                 str(SECONDS)], stdout=subprocess.PIPE, text=True))
            procs.append(support.spawn(
                ["node", os.path.join(HERE, "fleet_node.mjs"), bench_node,
                 addrs, key, log, str(SECONDS), "2000"],
                stdout=subprocess.PIPE, text=True))
        counts = fault_loop(masters, SECONDS, sys.stdout)
        outs = []
        for p in procs:
            out, _ = p.communicate(timeout=90)
            outs.append(out.strip())
            assert p.returncode == 0, (p.args, out)
            support.stop(p)
    finally:
        for p in procs:
            support.stop(p)
    print("\n".join(outs))
    intervals = parse(log)
    by_impl = {}
    for iv in intervals:
        by_impl[iv[2]] = by_impl.get(iv[2], 0) + 1
    print(f"grants: {by_impl}; faults: {counts}")
    bad = overlaps(intervals)
    assert bad == [], f"{len(bad)} overlaps, first: {bad[:3]}"
    inv = fence_inversions(intervals)
    assert inv == [], f"fences out of order: {inv[:3]}"
    # Every implementation really took part.
    for impl in ("python", "cli", "node"):
        assert by_impl.get(impl, 0) >= 3, by_impl

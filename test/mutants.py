#!/usr/bin/env python3
"""mutants.py: breaks the library on purpose, one small change at a time,
and checks that the tests named for each change catch it.

  test/mutants.sh [--jobs N] [--sim | --no-sim] [NAME-PART ...]

The mutants are in test/mutants.txt (format at its top). The tree is copied
(the files git tracks, as they are in the work tree) to a scratch directory
and built once; then, for each mutant: its text is replaced (it must occur
exactly once, or the list is stale and the run fails), the targets its
tests depend on are rebuilt (not the whole tree: a change in lib/ would
relink every test), its tests run (meson test --no-rebuild), and the file
is restored. A mutant is killed when one of its tests fails. The run ends
with "mutants: K killed of N" and exits 1 when one survived or could not be
applied or built.

The proof of the simulator (issue 31): a mutant with a sim: line is also run
against redlock-sim alone, on the same build, after its tests (fresh seeds
from its options until the first violation, within
REDLOCK_SIM_MUTANT_SECONDS of CPU, 60 by default); its result line says
"sim alone: killed (the first violation...)" or "sim alone: SURVIVED", and
the run ends with "sim alone: K killed of N" too: one the simulator alone
misses fails the run only with REDLOCK_SIM_PROOF_STRICT=1 (the proof is not
complete yet: CI reports it), and always with --sim (--no-sim skips this).
--sim runs only that part, for the mutants with a sim: line.

--jobs N (-j N; default REDLOCK_MUTANT_JOBS, else 2): N workers, each with
its own copy of the tree and build directory, take the mutants from one
queue; each result is printed whole when its mutant is done (so in the
order they finish), and the end lists the mutants not killed. The first
copy is built at full speed; the others after it, under nice, while the
first one already runs mutants. A mutant whose tests include one that
meson must not run alongside others (is_parallel: false) and takes fixed
ports or the machine (check-readme's demo ports, check-deb's dpkg -i; not
the python suites) runs its tests alone: the other
workers' tests wait (their rebuilds do not); those mutants are taken first,
while the other copies still build. REDLOCK_MUTANTS_KEEP=1 keeps the
scratch directory.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse(path):
    """Blocks: '## name' / 'file: F' / 'tests: T ...' / '---' original /
    '+++' replacement / '==='. Lines starting with '#' outside blocks are
    comments."""
    muts = []
    cur = None
    mode = None
    for raw in open(path, encoding="utf-8"):
        line = raw.rstrip("\n")
        if mode in ("orig", "repl"):
            if line == "+++" and mode == "orig":
                mode = "repl"
                continue
            if line == "===":
                for k in ("orig", "repl"):
                    cur[k] = "\n".join(cur[k])
                muts.append(cur)
                cur, mode = None, None
                continue
            cur[mode].append(line)
            continue
        if line.startswith("## "):
            cur = {"name": line[3:].strip(), "file": None, "tests": [],
                   "orig": [], "repl": [], "why": "", "pytest": None,
                   "readme": None, "sim": None}
            mode = "head"
        elif cur is not None and line.startswith("file:"):
            cur["file"] = line[5:].strip()
        elif cur is not None and line.startswith("tests:"):
            cur["tests"] = line[6:].split()
        elif cur is not None and line.startswith("pytest:"):
            cur["pytest"] = line[7:].strip()
        elif cur is not None and line.startswith("readme:"):
            cur["readme"] = line[7:].strip()
        elif cur is not None and line.startswith("sim:"):
            cur["sim"] = line[4:].strip()
        elif cur is not None and line.startswith("why:"):
            cur["why"] = line[4:].strip()
        elif cur is not None and line == "---":
            mode = "orig"
    if cur is not None:
        sys.exit(f"mutants.txt: block '{cur['name']}' is not closed by ===")
    for m in muts:
        if not m["file"] or not m["tests"] or not m["orig"]:
            sys.exit(f"mutants.txt: block '{m['name']}' needs file, tests "
                     "and an original text")
    return muts


def copy_tree(dst):
    files = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"],
                           check=True, capture_output=True).stdout
    for f in files.decode().split("\0"):
        if not f:
            continue
        src = os.path.join(ROOT, f)
        if not os.path.isfile(src):
            continue
        d = os.path.join(dst, f)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.copy2(src, d)


# The commands running now (each in its own session: a process group),
# so that an interrupt can end them all; once STOP is set, none starts.
LIVE = set()
LIVE_LOCK = threading.Lock()
STOP = threading.Event()
GRACE = 10   # s between SIGTERM and SIGKILL


def signal_group(p, sig):
    try:
        os.killpg(p.pid, sig)
    except OSError:
        pass


def stop_all():
    """SIGTERM to every command running (meson test then ends its tests,
    whose harness stops its servers), SIGKILL to those left after
    GRACE."""
    with LIVE_LOCK:
        STOP.set()
        live = list(LIVE)
    for p in live:
        signal_group(p, signal.SIGTERM)
    end = time.monotonic() + GRACE
    while time.monotonic() < end:
        with LIVE_LOCK:
            if not LIVE.intersection(live):
                break
        time.sleep(0.1)
    for p in live:
        signal_group(p, signal.SIGKILL)


def run(cmd, timeout, log, env=None):
    """Runs cmd in its own session; ends the session on timeout (SIGTERM,
    then SIGKILL after GRACE)."""
    with open(log, "a") as out:
        with LIVE_LOCK:
            if STOP.is_set():
                return -9
            p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                 start_new_session=True, env=env)
            LIVE.add(p)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            signal_group(p, signal.SIGTERM)
            try:
                p.wait(timeout=GRACE)
            except subprocess.TimeoutExpired:
                pass
            signal_group(p, signal.SIGKILL)
            p.wait()
            return -9
        finally:
            with LIVE_LOCK:
                LIVE.discard(p)


def introspect(build):
    """The build's targets (id -> files) and tests (name -> test)."""
    def get(what):
        out = subprocess.run(["meson", "introspect", what, build],
                             check=True, capture_output=True).stdout
        return json.loads(out)
    files = {t["id"]: t["filename"] for t in get("--targets")}
    tests = {t["name"]: t for t in get("--tests")}
    return files, tests


def targets_of(build, names, info):
    """The ninja targets (paths relative to the build directory) that the
    named tests need: their depends, which include the test's own
    executable. None when a name is not a test of the build."""
    files, tests = info
    want = []
    for n in names:
        if n not in tests:
            return None
        for dep in tests[n]["depends"]:
            for f in files.get(dep, []):
                rel = os.path.relpath(f, build)
                if rel not in want:
                    want.append(rel)
    return want


class Gate:
    """Tests of an exclusive mutant run alone: it waits for the tests
    running, and no test starts while it waits or runs."""

    def __init__(self):
        self.cv = threading.Condition()
        self.shared = 0
        self.alone = False
        self.waiting = 0

    def enter(self, alone):
        with self.cv:
            if alone:
                self.waiting += 1
                self.cv.wait_for(lambda: not self.alone and self.shared == 0)
                self.waiting -= 1
                self.alone = True
            else:
                self.cv.wait_for(lambda: not self.alone and self.waiting == 0)
                self.shared += 1

    def leave(self, alone):
        with self.cv:
            if alone:
                self.alone = False
            else:
                self.shared -= 1
            self.cv.notify_all()


class Run:
    """What the workers share: the queue, the results, stdout."""

    def __init__(self, muts, work, alone):
        self.queue = list(muts)
        self.work = work
        self.alone = alone          # names of tests that run alone
        self.lock = threading.Lock()
        self.gate = Gate()
        self.killed = 0
        self.bad = 0
        self.missed = []            # (status, name) of those not killed
        self.errors = []            # a worker's setup or crash
        self.sim_proof = False      # also the simulator alone (sim: line)
        self.sim_total = 0
        self.sim_killed = 0
        self.sim_missed = []        # names the simulator alone missed

    def take(self):
        with self.lock:
            if STOP.is_set() or not self.queue:
                return None
            return self.queue.pop(0)

    def report(self, status, name, block, sim=None):
        """One mutant's whole result, at once (sim: the simulator alone's
        verdict, True or False, when it ran)."""
        with self.lock:
            if sim is not None:
                self.sim_total += 1
                if sim:
                    self.sim_killed += 1
                else:
                    self.sim_missed.append(name)
            if status == "KILLED":
                self.killed += 1
            else:
                self.missed.append((status, name))
                if status != "SURVIVED":
                    self.bad += 1
            sys.stdout.write(block if block.endswith("\n") else block + "\n")
            sys.stdout.flush()


class Worker:
    def __init__(self, k, run_):
        self.k = k
        self.run = run_
        self.dir = os.path.join(run_.work, f"w{k}")
        self.src = os.path.join(self.dir, "src")
        self.build = os.path.join(self.dir, "build")
        self.info = None
        self.built = threading.Event()

    def setup(self, nice):
        """Copies the tree and configures it; None, or the log of a failure."""
        os.makedirs(self.dir)
        copy_tree(self.src)
        log = os.path.join(self.dir, "setup.log")
        pre = ["nice", "-n", "10"] if nice else []
        if run(pre + ["meson", "setup", self.build, self.src,
                      "-Dwerror=false"], 300, log) != 0:
            return log
        self.info = introspect(self.build)
        return None

    def compile(self, nice):
        """Builds the copy; None, or the log of a failure."""
        log = os.path.join(self.dir, "setup.log")
        pre = ["nice", "-n", "10"] if nice else []
        if run(pre + ["ninja", "-C", self.build], 900, log) != 0:
            return log
        return None

    def fail_setup(self, log):
        with self.run.lock:
            if not STOP.is_set():
                self.run.errors.append(
                    open(log, errors="replace").read()[-4000:] +
                    f"\nmutants: the unmutated copy does not build "
                    f"(worker {self.k})")
        stop_all()

    def main(self, after=None, configured=False):
        """Sets up (unless configured), builds after the worker `after`
        (nice: the first one's mutants already run), then takes mutants
        until the queue is empty."""
        try:
            nice = after is not None
            if not configured:
                log = self.setup(nice)
                if log:
                    return self.fail_setup(log)
            if after is not None:
                while not after.built.wait(1):
                    if STOP.is_set():
                        return
            if STOP.is_set():
                return
            log = self.compile(nice)
            if log:
                return self.fail_setup(log)
            self.built.set()
            i = 0
            while True:
                m = self.run.take()
                if m is None:
                    return
                i += 1
                self.mutant(m, i)
        except Exception as e:   # a crash stops the run, loudly
            with self.run.lock:
                self.run.errors.append(f"mutants: worker {self.k}: "
                                       f"{type(e).__name__}: {e}")
            stop_all()
        finally:
            self.built.set()     # a worker waiting for this one goes on

    def sim_alone(self, m, i):
        """The mutant (applied and built) against redlock-sim alone:
        (killed, the text for its result line)."""
        log = os.path.join(self.dir, f"sim-{i}.log")
        env = dict(os.environ, REDLOCK_SIM_ARGS=(
            f"--seconds {SIM_BUDGET} --stop-at-first {m['sim']}"))
        t = time.monotonic()
        self.run.gate.enter(False)
        try:
            rc = run(["meson", "test", "-C", self.build, "--no-rebuild",
                      "--print-errorlogs", "sim-mutant"], 1200, log, env)
        finally:
            self.run.gate.leave(False)
        out = open(log, errors="replace").read()
        took = time.monotonic() - t
        first = re.search(r"^sim: the first violation (.*)$", out, re.M)
        if rc != 0 and first:
            return True, (f"\n         sim alone: killed, the first "
                          f"violation {first.group(1)} ({took:.0f} s)")
        if rc != 0:
            # The simulator stopped otherwise (an assertion of the library,
            # a crash): the mutant is caught all the same.
            tail = [x for x in out.splitlines()
                    if "FAIL" in x or "Assert" in x or "signal" in x]
            return True, (f"\n         sim alone: killed (the simulator "
                          f"failed: {tail[0].strip()[:100] if tail else rc})"
                          f" ({took:.0f} s)")
        return False, (f"\n         sim alone: SURVIVED {SIM_BUDGET} CPU s "
                       f"of {m['sim']}")

    def mutant(self, m, i):
        if m["file"].endswith(("meson.build", "meson_options.txt",
                               "meson.options")):
            self.info = introspect(self.build)
        proof = self.run.sim_proof and m.get("sim") is not None
        want = targets_of(self.build, m["tests"] +
                          (["sim-mutant"] if proof else []), self.info)
        if want is None:
            return self.run.report(
                "NOTEST", m["name"],
                f"NOTEST   {m['name']}: not a test of the build: "
                f"{' '.join(m['tests'])}")
        path = os.path.join(self.src, m["file"])
        text = open(path, encoding="utf-8").read()
        n = text.count(m["orig"])
        if n != 1:
            return self.run.report(
                "STALE", m["name"],
                f"STALE    {m['name']}: the original text occurs {n} "
                f"times in {m['file']}")
        alone = any(t in self.run.alone for t in m["tests"])
        ts = time.monotonic()
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.replace(m["orig"], m["repl"]))
            blog = os.path.join(self.dir, f"build-{i}.log")
            if run(["ninja", "-C", self.build] + want, 900, blog) != 0:
                if STOP.is_set():
                    return
                return self.run.report(
                    "NOBUILD", m["name"],
                    f"NOBUILD  {m['name']}: see the build log below\n"
                    + open(blog, errors="replace").read()[-3000:])
            tlog = os.path.join(self.dir, f"test-{i}.log")
            env = None
            if m.get("simargs"):
                # --sim: the simulator alone (test sim-mutant reads its
                # options from REDLOCK_SIM_ARGS)
                env = dict(os.environ, REDLOCK_SIM_ARGS=m["simargs"])
            if m["pytest"]:
                # python suites: only the tests of this mutant
                # (test/python/run.sh passes them to pytest as -k)
                env = dict(os.environ, REDLOCK_PYTEST_K=m["pytest"])
            if m["readme"]:
                # check-readme: only the pages of this mutant
                env = dict(env or os.environ,
                           REDLOCK_README_PAGES=m["readme"])
            tw = time.monotonic()
            self.run.gate.enter(alone)
            ts += time.monotonic() - tw   # its time, not the wait's
            try:
                if STOP.is_set():
                    return
                # --maxfail 1: the first test that fails kills it; the
                # others of its list are stopped then, not waited for
                rc = run(["meson", "test", "-C", self.build, "--no-rebuild",
                          "--num-processes", "2", "--maxfail", "1",
                          "--print-errorlogs"]
                         + m["tests"], 1200, tlog, env)
            finally:
                self.run.gate.leave(alone)
            if STOP.is_set():
                return
            took = time.monotonic() - ts
            out = open(tlog, errors="replace").read()
            sim_line, sim_ok = "", None
            if proof:
                sim_ok, sim_line = self.sim_alone(m, i)
                if STOP.is_set():
                    return
            failed = sorted(set(re.findall(
                r"^\s*\d+/\d+ \S+ / (\S+)\s+(?:FAIL|TIMEOUT|ERROR)",
                out, re.M)))
            if re.search(r"^(Ok|Fail):\s+", out, re.M) is None and rc == 0:
                self.run.report(
                    "NOTRUN", m["name"],
                    f"NOTRUN   {m['name']}: meson ran no test "
                    f"({' '.join(m['tests'])}){sim_line}", sim_ok)
            elif rc != 0:
                by = ", ".join(failed) if failed else f"meson exit {rc}"
                first = re.search(r"^sim: the first violation .*$", out,
                                  re.M)
                if first:
                    by += " (" + first.group(0)[5:] + ")"
                self.run.report(
                    "KILLED", m["name"],
                    f"KILLED   {m['name']} by {by} ({took:.0f} s){sim_line}",
                    sim_ok)
            else:
                self.run.report(
                    "SURVIVED", m["name"],
                    f"SURVIVED {m['name']}: {' '.join(m['tests'])} "
                    f"passed ({took:.0f} s){sim_line}", sim_ok)
        finally:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)


SIM_BUDGET = os.environ.get("REDLOCK_SIM_MUTANT_SECONDS") or "60"


def arguments(argv):
    """(jobs, name parts, sim)."""
    jobs = os.environ.get("REDLOCK_MUTANT_JOBS") or "2"
    only = []
    sim = False
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            print(__doc__.strip())
            sys.exit(0)
        if a == "--sim":
            sim = True
            i += 1
            continue
        if a == "--no-sim":
            sim = None
            i += 1
            continue
        if a in ("-j", "--jobs"):
            if i + 1 == len(argv):
                sys.exit(f"mutants: {a} needs a number")
            jobs = argv[i + 1]
            i += 2
            continue
        if a.startswith("--jobs="):
            jobs = a[len("--jobs="):]
        elif re.fullmatch(r"-j\d+", a):
            jobs = a[2:]
        elif a == "--":
            only += argv[i + 1:]
            break
        else:
            only.append(a)
        i += 1
    if not re.fullmatch(r"\d+", jobs.strip()) or int(jobs) < 1:
        sys.exit(f"mutants: --jobs (REDLOCK_MUTANT_JOBS) must be a number "
                 f"of 1 or more, not '{jobs}'")
    return int(jobs), only, sim


def on_term(signum, frame):
    raise KeyboardInterrupt


def main():
    jobs, only, sim = arguments(sys.argv[1:])
    muts = parse(os.path.join(HERE, "mutants.txt"))
    if only:
        muts = [m for m in muts if any(o in m["name"] for o in only)]
    if sim:
        # The safety mutants (a sim: line) against the simulator alone:
        # fresh seeds until the first violation or the budget
        # (REDLOCK_SIM_MUTANT_SECONDS of CPU, 60 by default).
        muts = [m for m in muts if m["sim"] is not None]
        for m in muts:
            m["tests"] = ["sim-mutant"]
            m["pytest"] = None
            m["readme"] = None
            m["simargs"] = (f"--seconds {SIM_BUDGET} --stop-at-first "
                            f"{m['sim']}")
    if not muts:
        sys.exit("mutants: no mutant selected")
    jobs = min(jobs, len(muts))
    signal.signal(signal.SIGTERM, on_term)
    work = tempfile.mkdtemp(prefix="redlock-mutants.")
    keep = os.environ.get("REDLOCK_MUTANTS_KEEP") == "1"
    t0 = time.monotonic()
    threads = []
    try:
        r = Run(muts, work, set())
        r.sim_proof = sim is False   # the default: tests, then the proof
        workers = [Worker(k, r) for k in range(1, jobs + 1)]
        # The first copy is configured here: its tests tell which run
        # alone, and those mutants go first.
        log = workers[0].setup(False)
        if log:
            print(open(log, errors="replace").read()[-4000:])
            print("mutants: the unmutated copy does not build")
            return 1
        # Not the python suites' (is_parallel: false keeps them from
        # each other within one meson run; each copy has its own venv and
        # ports the harness picks): those that take fixed ports or the
        # machine (check-readme's demo ports, check-deb's dpkg -i).
        r.alone = {n for n, t in workers[0].info[1].items()
                   if not t.get("is_parallel", True)
                   and not {"python", "python-one"} &
                   {x.split(":")[-1] for x in t.get("suite", [])}}
        if jobs > 1:
            r.queue.sort(key=lambda m: not any(t in r.alone
                                               for t in m["tests"]))
        print(f"mutants: {len(muts)} to run, {jobs} at a time")
        sys.stdout.flush()
        for k, w in enumerate(workers):
            if k == 0:
                t = threading.Thread(target=w.main,
                                     kwargs={"configured": True})
            else:
                t = threading.Thread(target=w.main,
                                     kwargs={"after": workers[k - 1]})
            t.daemon = True
            t.start()
            threads.append(t)
        for t in threads:
            while t.is_alive():
                t.join(1)
        if r.errors:
            for e in r.errors:
                print(e)
            return 1
        print(f"({time.monotonic() - t0:.0f} s)")
        if r.missed:
            print(f"mutants: not killed ({len(r.missed)}):")
            for status, name in sorted(r.missed):
                print(f"  {status:8} {name}")
        if r.sim_missed:
            print(f"sim alone: not killed ({len(r.sim_missed)}):")
            for name in sorted(r.sim_missed):
                print(f"  {name}")
        if r.sim_proof:
            print(f"sim alone: {r.sim_killed} killed of {r.sim_total}")
        print(f"mutants: {r.killed} killed of {len(muts)}")
        # The simulator alone's misses fail the run only when asked
        # (REDLOCK_SIM_PROOF_STRICT=1, and --sim): issue 31's proof is not
        # complete yet, and CI reports it (see the note of that issue).
        strict = sim is True or os.environ.get("REDLOCK_SIM_PROOF_STRICT") == "1"
        return 0 if (r.killed == len(muts) and r.bad == 0 and
                     not (strict and r.sim_missed)) else 1
    except KeyboardInterrupt:
        stop_all()
        for t in threads:
            t.join(30)
        print("mutants: interrupted")
        return 130
    finally:
        stop_all()
        sys.stdout.flush()
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"mutants: kept {work}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""mutants.py: breaks the library on purpose, one small change at a time,
and checks that the tests named for each change catch it.

  test/mutants.sh [NAME-PART ...]

The mutants are in test/mutants.txt (format at its top). The tree is copied
(the files git tracks, as they are in the work tree) to a scratch directory
and built once; then, for each mutant: its text is replaced (it must occur
exactly once, or the list is stale and the run fails), the targets its
tests depend on are rebuilt (not the whole tree: a change in lib/ would
relink every test), its tests run (meson test --no-rebuild), and the file is restored. A mutant
is killed when one of its tests fails. The run ends with
"mutants: K killed of N" and exits 1 when one survived or could not be
applied or built.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
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
                   "orig": [], "repl": [], "why": "", "pytest": None}
            mode = "head"
        elif cur is not None and line.startswith("file:"):
            cur["file"] = line[5:].strip()
        elif cur is not None and line.startswith("tests:"):
            cur["tests"] = line[6:].split()
        elif cur is not None and line.startswith("pytest:"):
            cur["pytest"] = line[7:].strip()
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


def run(cmd, timeout, log, env=None):
    """Runs cmd in its own session; kills the session on timeout."""
    with open(log, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True, env=env)
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            p.wait()
            return -9


def targets_of(build, names):
    """The ninja targets (paths relative to the build directory) that the
    named tests need: their depends, which include the test's own
    executable. None when a name is not a test of the build."""
    def introspect(what):
        out = subprocess.run(["meson", "introspect", what, build],
                             check=True, capture_output=True).stdout
        return json.loads(out)
    files = {}
    for t in introspect("--targets"):
        files[t["id"]] = t["filename"]
    tests = {t["name"]: t for t in introspect("--tests")}
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


def main():
    only = sys.argv[1:]
    muts = parse(os.path.join(HERE, "mutants.txt"))
    if only:
        muts = [m for m in muts if any(o in m["name"] for o in only)]
    if not muts:
        sys.exit("mutants: no mutant selected")
    work = tempfile.mkdtemp(prefix="redlock-mutants.")
    keep = os.environ.get("REDLOCK_MUTANTS_KEEP") == "1"
    src = os.path.join(work, "src")
    build = os.path.join(work, "build")
    t0 = time.monotonic()
    try:
        copy_tree(src)
        log = os.path.join(work, "setup.log")
        if run(["meson", "setup", build, src, "-Dwerror=false"], 300,
               log) != 0 or run(["ninja", "-C", build], 900, log) != 0:
            print(open(log).read()[-4000:])
            print("mutants: the unmutated copy does not build")
            return 1
        killed, bad = 0, 0
        for i, m in enumerate(muts, 1):
            want = targets_of(build, m["tests"])
            if want is None:
                print(f"NOTEST   {m['name']}: not a test of the build: "
                      f"{' '.join(m['tests'])}")
                bad += 1
                continue
            path = os.path.join(src, m["file"])
            text = open(path, encoding="utf-8").read()
            n = text.count(m["orig"])
            if n != 1:
                print(f"STALE    {m['name']}: the original text occurs {n} "
                      f"times in {m['file']}")
                bad += 1
                continue
            ts = time.monotonic()
            try:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text.replace(m["orig"], m["repl"]))
                blog = os.path.join(work, f"build-{i}.log")
                if run(["ninja", "-C", build] + want, 900, blog) != 0:
                    print(f"NOBUILD  {m['name']}: see the build log below")
                    print(open(blog).read()[-3000:])
                    bad += 1
                    continue
                tlog = os.path.join(work, f"test-{i}.log")
                env = None
                if m["pytest"]:
                    # python suites: only the tests of this mutant
                    # (test/python/run.sh passes them to pytest as -k)
                    env = dict(os.environ, REDLOCK_PYTEST_K=m["pytest"])
                rc = run(["meson", "test", "-C", build, "--no-rebuild",
                          "--num-processes", "2", "--print-errorlogs"]
                         + m["tests"], 1200, tlog, env)
                took = time.monotonic() - ts
                out = open(tlog, errors="replace").read()
                failed = sorted(set(re.findall(
                    r"^\s*\d+/\d+ \S+ / (\S+)\s+(?:FAIL|TIMEOUT|ERROR)",
                    out, re.M)))
                if re.search(r"^(Ok|Fail):\s+", out, re.M) is None and rc == 0:
                    print(f"NOTRUN   {m['name']}: meson ran no test "
                          f"({' '.join(m['tests'])})")
                    bad += 1
                elif rc != 0:
                    killed += 1
                    by = ", ".join(failed) if failed else f"meson exit {rc}"
                    print(f"KILLED   {m['name']} by {by} ({took:.0f} s)")
                else:
                    print(f"SURVIVED {m['name']}: {' '.join(m['tests'])} "
                          f"passed ({took:.0f} s)")
            finally:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            sys.stdout.flush()
        print(f"({time.monotonic() - t0:.0f} s)")
        print(f"mutants: {killed} killed of {len(muts)}")
        return 0 if killed == len(muts) and bad == 0 else 1
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""check-readme.py SRCDIR BUILDDIR: every C, shell and Python example of
README.md and of the pages it sends readers to (DOCS below: the test
text, the guarantees, the C API, the CLI reference, the kinds of masters,
the Debian packages, the Python guide), compiled and run, so that the
documentation cannot rot (issue 11, item 7; issue 33 split the README,
and every example still runs wherever it now lives).

Blocks, by their fence:
  ```c        with main(): compiled against the build's library and run
              against the demo's masters (exit 0 wanted);
              without main(): a fragment, compiled at file scope after the
              includes and an on_acquired declaration (its README comment
              says so: <!-- readme-test: fragment ... -->)
  ```sh       run with bash -e from the source root, `redlock` on PATH
  ```python   run with this interpreter, the Python binding from the tree
              (bindings/python/src on PYTHONPATH) over the build's
              library (REDLOCK_LIBRARY); exit 0 wanted
  ```console  a session: the `$ ` lines run in one shell, each must exit 0
              (show a failure's status with `; echo $?`), and their
              output is compared with the README's line by line: every
              number counts except tokens, durations and time columns
              (norm() says which); a `...` line stands for any lines
A block preceded by <!-- readme-test: skip: WHY --> is listed, not run;
one preceded by <!-- readme-test: ordinary masters ... --> runs (sh,
console or python) with REDLOCK_SERVERS set to the ordinary masters below
(the README's "your own Redis" examples: masters as most Redis runs,
without persistence, and declared nothing);
```text and unlabelled blocks are output or pseudo-code, not examples.

The demo's masters: cluster-compose/cluster.sh up 5 7101 (appendonly +
appendfsync always, the default), in a private state dir, stopped at the
end whatever happens. Ports 7101-7105 and 7200-7205 must be free (the
examples name them); the test fails clearly if they are not. Blocks that
start a cluster of their own get another private state dir.

The ordinary masters: REDLOCK_PERSIST=none cluster-compose/cluster.sh up 3
7121 (no persistence, addrs declares nothing), in a third state dir,
started fresh so that the first block that uses them meets the first-use
window of the restart guard as a newcomer's masters would. Ports
7121-7123 and 7220-7223 must be free too.

REDLOCK_README_PAGES=NAME[,NAME...] runs the blocks of those pages only
(of DOCS, by exact name; an unknown name fails): test/mutants.sh sets it
for a mutant of one page, the whole check being minutes.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

SRC = os.path.abspath(sys.argv[1])
BUILD = os.path.abspath(sys.argv[2])
CC = os.environ.get("CC", "cc")

PRELUDE = """#include <stdio.h>
#include <string.h>

#include <uv.h>
#include <redlock.h>

void on_acquired(redlock_lock_t *lock, int status, const redlock_result *res,
                 void *arg);
"""

# Where the examples live, in the order they run (the README first: its
# ordinary-masters blocks are the masters' first use).
DOCS = ["README.md", "TESTING.md", "docs/GUARANTEES.md", "docs/API.md",
        "docs/CLI.md", "docs/MASTERS.md", "docs/PACKAGING.md",
        "bindings/python/README.md"]

ORDINARY_PORTS = list(range(7121, 7124)) + list(range(7220, 7224))

failures = []


def fail(what, detail):
    failures.append(what)
    print(f"FAIL {what}\n{detail}", file=sys.stderr)


def blocks(text):
    """(line, lang, body, directive) for each fenced block."""
    lines = text.split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1), i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        body = "\n".join(lines[i + 1:j]) + "\n"
        # The directive: an HTML comment ending on the line before.
        directive = ""
        k = i - 1
        if k >= 0 and lines[k].rstrip().endswith("-->"):
            while k >= 0 and "<!--" not in lines[k]:
                k -= 1
            comment = " ".join(lines[k:i])
            m2 = re.search(r"<!--\s*readme-test:\s*(.*?)\s*-->", comment)
            if m2:
                directive = m2.group(1)
        out.append((start + 1, lang, body, directive))
        i = j + 1
    return out


def port_busy(port):
    s = socket.socket()
    s.settimeout(0.2)
    try:
        return s.connect_ex(("127.0.0.1", port)) == 0
    finally:
        s.close()


TIME_UNIT = r"(?:ns|us|µs|ms|s|m|h)\b"


def norm(line, masked_cols=()):
    """What of an output line must match the README exactly: everything
    but tokens (hex runs of 8+ digits, and 13+ digit decimals: fencing
    tokens come from a master's clock), durations (a number with a time
    unit) and the fields of columns named *_us, *_ms or *_s (latencies,
    ttls left). Every other number counts: "3 of 3 masters", "quorum 2",
    an exit status."""
    fields = line.split()
    for i in masked_cols:
        if i < len(fields):
            fields[i] = "T"
    line = " ".join(fields)
    line = re.sub(r"\b[0-9a-f]{8,}\b", "H", line)
    line = re.sub(r"\b\d{13,}\b", "H", line)
    line = re.sub(r"(?<![\d.])\d+(?:\.\d+)?\s?" + TIME_UNIT, "T", line)
    return line


def timed_columns(line):
    """Indices of the columns of a table header whose name is a time."""
    return [i for i, f in enumerate(line.split())
            if re.search(r"_(?:us|ms|s)$", f)]


def norm_block(lines):
    out, cols = [], ()
    for x in lines:
        if timed_columns(x):
            cols = timed_columns(x)
            out.append(norm(x))
        elif x.strip() == "":
            cols = ()
            out.append("")
        else:
            out.append(norm(x, cols))
    return out


def match(want, have):
    """want may hold "..." lines: each matches any run of lines (none
    included); every other line must match in order, to the end."""
    if not want:
        return not have
    if want[0] == "...":
        return any(match(want[1:], have[k:]) for k in range(len(have) + 1))
    return bool(have) and want[0] == have[0] and match(want[1:], have[1:])


def run(cmd, env, timeout, cwd=SRC, stdin=None):
    return subprocess.run(cmd, env=env, cwd=cwd, timeout=timeout,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          input=stdin, text=True)


def main():
    work = tempfile.mkdtemp(prefix="redlock-readme.")
    main_dir = os.path.join(work, "cluster-main")
    plain_dir = os.path.join(work, "cluster-plain")
    other_dir = os.path.join(work, "cluster-other")
    cluster = os.path.join(SRC, "cluster-compose", "cluster.sh")
    only = [x for x in os.environ.get("REDLOCK_README_PAGES", "").split(",")
            if x]
    unknown = [x for x in only if x not in DOCS]
    if unknown:
        print(f"check-readme: REDLOCK_README_PAGES names {unknown}, not "
              f"pages of DOCS ({', '.join(DOCS)})", file=sys.stderr)
        return 1
    env = dict(os.environ)
    env["PATH"] = os.path.join(BUILD, "tools") + os.pathsep + env["PATH"]
    env["REDLOCK_FAULTPROXY"] = os.path.join(BUILD, "tools",
                                             "redlock-faultproxy")
    for k in list(env):
        if k.startswith("REDLOCK_") and k != "REDLOCK_FAULTPROXY":
            del env[k]
    docs = []
    for name in DOCS:
        path = os.path.join(SRC, name)
        if not os.path.exists(path):
            print(f"check-readme: {name} is missing (DOCS lists it)",
                  file=sys.stderr)
            return 1
        docs.append((name, open(path).read()))
    busy = [p for p in list(range(7101, 7106)) + list(range(7200, 7206)) +
            ORDINARY_PORTS if port_busy(p)]
    if busy:
        print(f"check-readme: ports {busy} are in use: the README's "
              "examples use the demo's ports 7101-7105 and ordinary "
              "masters on 7121-7123; stop what holds "
              "them (cluster-compose/cluster.sh down)", file=sys.stderr)
        return 1
    up = dict(env, REDLOCK_CLUSTER_DIR=main_dir)
    plain = dict(env, REDLOCK_CLUSTER_DIR=plain_dir, REDLOCK_PERSIST="none")
    ran = compiled = skipped = 0
    try:
        for what, cenv, args in (("demo", up, ["5", "7101"]),
                                 ("ordinary", plain, ["3", "7121"])):
            r = run(["bash", cluster, "up"] + args, cenv, 60)
            if r.returncode != 0:
                print(f"check-readme: the {what} masters did not start:\n"
                      + r.stdout, file=sys.stderr)
                return 1
        r = run(["bash", cluster, "addrs"], plain, 30)
        ordinary = r.stdout.strip()
        if r.returncode != 0 or not ordinary or "durable" in ordinary:
            print(f"check-readme: the ordinary masters' addresses: "
                  f"{r.stdout}", file=sys.stderr)
            return 1
        env["REDLOCK_CLUSTER_DIR"] = other_dir
        libdir = os.path.join(BUILD, "lib")
        uv = subprocess.run(["pkg-config", "--cflags", "--libs", "libuv"],
                            capture_output=True, text=True,
                            check=True).stdout.split()
        flags = ["-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                 "-Werror", "-I", os.path.join(SRC, "include")]
        every = [(name, b) for name, text in docs for b in blocks(text)
                 if not only or name in only]
        for n, (name, (line, lang, body, directive)) in enumerate(every):
            what = f"{name}:{line} ({lang or 'plain'})"
            if lang not in ("c", "sh", "console", "python"):
                continue
            if directive.startswith("skip"):
                print(f"skip {what}: {directive[4:].lstrip(': ')}")
                skipped += 1
                continue
            benv = env
            if directive.startswith("ordinary"):
                if lang not in ("sh", "console", "python"):
                    fail(what, "ordinary masters: for sh, console and "
                         "python blocks")
                    continue
                benv = dict(env, REDLOCK_SERVERS=ordinary)
            if lang == "c":
                src = os.path.join(work, f"ex{n}.c")
                if re.search(r"\bint main\s*\(", body):
                    open(src, "w").write(body)
                    exe = os.path.join(work, f"ex{n}")
                    r = run([CC] + flags + [src, "-o", exe,
                             os.path.join(libdir, "libredlock.so"),
                             "-Wl,-rpath," + libdir] + uv, env, 120)
                    if r.returncode != 0:
                        fail(what + ": does not compile", r.stdout)
                        continue
                    r = run([exe], env, 60)
                    if r.returncode != 0:
                        fail(what + f": exit {r.returncode}", r.stdout)
                        continue
                    print(f"ran {what}: {r.stdout.strip().splitlines()[-1]}")
                    ran += 1
                else:
                    if "fragment" not in directive:
                        fail(what, "a C block without main() must say "
                             "<!-- readme-test: fragment ... -->")
                        continue
                    open(src, "w").write(PRELUDE + body)
                    r = run([CC] + flags + ["-Wno-unused-function", "-c",
                             src, "-o", src + ".o"] +
                            [f for f in uv if f.startswith("-I")], env, 60)
                    if r.returncode != 0:
                        fail(what + ": fragment does not compile", r.stdout)
                        continue
                    print(f"compiled {what} (fragment)")
                    compiled += 1
            elif lang == "python":
                src = os.path.join(work, f"ex{n}.py")
                open(src, "w").write(body)
                penv = dict(benv, PYTHONPATH=os.path.join(
                    SRC, "bindings", "python", "src"),
                    REDLOCK_LIBRARY=os.path.join(libdir, "libredlock.so"),
                    PYTHONDONTWRITEBYTECODE="1")
                r = run([sys.executable, src], penv, 120)
                if r.returncode != 0:
                    fail(what + f": exit {r.returncode}", r.stdout)
                    continue
                last = r.stdout.strip().splitlines()
                print(f"ran {what}: {last[-1] if last else ''}")
                ran += 1
            elif lang == "sh":
                r = run(["bash", "-e", "-o", "pipefail"], benv, 120,
                        stdin=body)
                if r.returncode != 0:
                    fail(what + f": exit {r.returncode}", r.stdout)
                    continue
                print(f"ran {what}")
                ran += 1
            else:
                ran += console(what, body, benv, work, n)
    finally:
        run(["bash", cluster, "down"], dict(env, REDLOCK_CLUSTER_DIR=other_dir),
            60)
        run(["bash", cluster, "down"], up, 60)
        run(["bash", cluster, "down"], plain, 60)
        shutil.rmtree(work, ignore_errors=True)
    print(f"README and its pages' examples: {ran} run, {compiled} fragments compiled, "
          f"{skipped} skipped, {len(failures)} failed")
    return 1 if failures else 0


def console(what, body, env, work, n):
    """Replays a `$ ` session and compares its output."""
    cmds, expected = [], []
    for line in body.rstrip("\n").split("\n"):
        if line.startswith("$ "):
            cmds.append(line[2:])
            expected.append([])
        elif cmds:
            expected[-1].append(line)
    script = "exec 2>&1\n"
    for i, c in enumerate(cmds):
        script += f"echo '@@{i}@@'\n{c}\necho \"@@rc $?@@\"\n"
    r = run(["bash"], env, 120, stdin=script)
    got = re.split(r"^@@\d+@@\n", r.stdout, flags=re.M)[1:]
    if len(got) != len(cmds):
        fail(what, f"the session stopped early:\n{r.stdout}")
        return 0
    for c, want, out in zip(cmds, expected, got):
        m = re.search(r"^@@rc (\d+)@@\n?\Z", out, flags=re.M)
        if m is None:
            fail(what, f"$ {c}\nno exit status:\n{out}")
            return 0
        out = out[:m.start()]
        # A command shown without its status must succeed; show a
        # failure's status in the README (`...; echo $?`), where it is
        # compared like any other number.
        if m.group(1) != "0":
            fail(what, f"$ {c}\nexited {m.group(1)} (README shows no "
                 f"failure):\n{out}")
            return 0
        have = out.rstrip("\n").split("\n") if out.strip() else []
        w = [x if x.strip() != "..." else "..." for x in norm_block(want)]
        h = norm_block(have)
        if not match(w, h):
            fail(what, f"$ {c}\nREADME:\n  " + "\n  ".join(want) +
                 "\ngot:\n  " + "\n  ".join(have))
            return 0
    print(f"replayed {what}: {len(cmds)} commands")
    return 1


if __name__ == "__main__":
    sys.exit(main())

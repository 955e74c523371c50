#!/usr/bin/env python3
"""check-layers.py DIR: no circle of files in DIR, and no file reaching
up a layer.

A file A depends on B when A includes B's header (B.h, for B.c) or calls a
function that B defines. A circle (A depends on B ... depends on A) means
the files cannot be read, changed or tested one layer at a time
(docs/DESIGN.md, "Layers"). Exits 1 and prints each circle found (as the
strongly connected components of the graph, with the edges inside them).
Function calls are found by name, after comments and strings are removed:
good enough for C written in this project's style (no function pointers
called by a name another file defines).

When DIR's meson.build lists its folders bottom up (`lib_layers = [...]`,
lib/), a file may depend only on its own folder and the folders before
it: a dependency that points up is reported like a circle."""
import os
import re
import sys


def strip(src):
    src = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'),
                 src, flags=re.S)
    src = re.sub(r'//[^\n]*', '', src)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', src)


def layers_of(d):
    """The folders of DIR bottom up, from `lib_layers = [...]` in its
    meson.build (the one list the build and this check share), or None
    for a flat directory."""
    try:
        m = re.search(r'^lib_layers\s*=\s*\[(.*?)\]',
                      open(os.path.join(d, 'meson.build')).read(),
                      re.S | re.M)
    except OSError:
        return None
    return re.findall(r"'([\w-]+)'", m.group(1)) if m else None


def graph(d):
    """Units: a file's name without .c or .h (x.c and x.h are one unit),
    in the folder that holds it. Edges: includes (from either file of a
    unit) and calls (from its .c)."""
    paths = {}
    for root, _, names in os.walk(d):
        for n in names:
            if n.endswith(('.c', '.h')):
                paths.setdefault(n[:-2], []).append(os.path.join(root, n))
    folder = {u: os.path.relpath(os.path.dirname(ps[0]), d)
              for u, ps in paths.items()}
    raw = {u: {p: open(p, errors='replace').read() for p in ps}
           for u, ps in paths.items()}
    code = {u: strip(t) for u, fs in raw.items()
            for p, t in fs.items() if p.endswith('.c')}
    defines = {}
    for u, s in code.items():
        for m in re.finditer(r'^[a-z][\w \*]*?\b(\w+)\s*\([^;{]*\)\s*\{',
                             s, re.M):
            if not re.search(r'^static\b', m.group(0)):
                defines.setdefault(m.group(1), u)
    edges = {u: {} for u in paths}
    for u, fs in raw.items():
        for p, t in fs.items():
            for inc in re.findall(r'#include "(?:[\w./]*/)?([\w]+)\.h"', t):
                if inc in paths and inc != u:
                    edges[u].setdefault(inc, set()).add(
                        f'#include "{inc}.h"')
    for u, s in code.items():
        for name, g in defines.items():
            if g != u and re.search(r'\b' + re.escape(name) + r'\s*\(', s):
                edges[u].setdefault(g, set()).add(name + '()')
    return sorted(paths), edges, folder


def sccs(nodes, edges):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return out


def show(a, b, edges):
    why = sorted(edges[a][b])
    more = f" (+{len(why) - 4})" if len(why) > 4 else ""
    return f"  {a} -> {b}: {', '.join(why[:4])}{more}"


def self_test():
    """The check fails on what it exists to catch: an include that points
    up a layer, a call that does, a circle inside one layer, a file in no
    layer; and passes a tree without them."""
    import contextlib
    import io
    import tempfile

    def run(files):
        with tempfile.TemporaryDirectory() as d:
            open(os.path.join(d, 'meson.build'), 'w').write(
                "lib_layers = ['low', 'master', 'high']\n")
            for path, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, path)),
                            exist_ok=True)
                open(os.path.join(d, path), 'w').write(text)
            sys.argv[1:] = [d]
            with contextlib.redirect_stdout(io.StringIO()):
                return main()
    good = {'low/a.c': 'int a(void) {\n  return 0;\n}\n',
            'high/b.c': '#include "a.h"\nint b(void) {\n  return a();\n}\n',
            'low/a.h': 'int a(void);\n'}
    cases = {
        'include up': dict(good, **{'low/a.h': '#include "b.h"\n',
                                    'high/b.h': ''}),
        'call up': dict(good, **{
            'low/a.c': 'int a(void) {\n  return b();\n}\n'}),
        'circle': dict(good, **{
            'low/c.c': 'int c(void) {\n  return d();\n}\n',
            'low/d.c': 'int d(void) {\n  return c();\n}\n'}),
        'no layer': dict(good, **{'other/e.c': ''}),
        'kind branch': dict(good, **{
            'high/b.c': 'int b(struct m *m) {\n'
                        '  return m->cluster != 0;\n}\n'}),
    }
    if run(good) != 0:
        print("check-layers: self-test: a good tree failed")
        return 1
    for name, files in cases.items():
        if run(files) != 1:
            print(f"check-layers: self-test: '{name}' passed")
            return 1
    print(f"check-layers: self-test: {len(cases)} bad trees caught")
    return 0


def main():
    if sys.argv[1] == '--self-test':
        return self_test()
    d = sys.argv[1]
    files, edges, folder = graph(d)
    bad = 0
    for comp in sccs(files, edges):
        bad = 1
        print(f"check-layers: {d}: a circle of {len(comp)} files: "
              f"{' '.join(comp)}")
        for a in comp:
            for b in comp:
                if b in edges[a]:
                    print(show(a, b, edges))
    layers = layers_of(d)
    if layers is not None and 'master' in layers:
        # Only the master layer knows which kind a master is: outside it,
        # reading a kind's own state or comparing a master's table is a
        # branch on the kind (issue 30).
        kind = re.compile(r'(->|\.)(cluster|sentinel)\b|\bops\s*[!=]=\s*&')
        for root, _, names in os.walk(d):
            if os.path.relpath(root, d).split(os.sep)[0] == 'master':
                continue
            for n in sorted(names):
                if not n.endswith(('.c', '.h')):
                    continue
                text = strip(open(os.path.join(root, n),
                                  errors='replace').read())
                for no, line in enumerate(text.split('\n'), 1):
                    if kind.search(line):
                        bad = 1
                        print(f"check-layers: {d}: {n}:{no} asks which "
                              f"kind a master is outside master/: "
                              f"{line.strip()}")
    if layers is not None:
        rank = {f: i for i, f in enumerate(layers)}
        for u in files:
            if folder[u] not in rank:
                bad = 1
                print(f"check-layers: {d}: {u} is in {folder[u]}/, "
                      f"not a layer of lib_layers ({' '.join(layers)})")
        for a in files:
            for b in sorted(edges[a]):
                ra, rb = rank.get(folder[a], -1), rank.get(folder[b], -1)
                if rb > ra >= 0:
                    bad = 1
                    print(f"check-layers: {d}: {folder[a]}/{a} reaches up "
                          f"into {folder[b]}/{b}")
                    print(show(a, b, edges))
    if bad:
        return 1
    where = (f", {len(layers)} layers in order ({' < '.join(layers)})"
             if layers else "")
    print(f"check-layers: {d}: {len(files)} units, no circle{where}")
    return 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""check-layers.py DIR [--report]: no circle of files in DIR.

A file A depends on B when A includes B's header (B.h, for B.c) or calls a
function that B defines. A circle (A depends on B ... depends on A) means
the files cannot be read, changed or tested one layer at a time
(docs/DESIGN.md, "Layers"). Exits 1 and prints each circle found (as the
strongly connected components of the graph, with the edges inside them).
Function calls are found by name, after comments and strings are removed:
good enough for C written in this project's style (no function pointers
called by a name another file defines)."""
import os
import re
import sys


def strip(src):
    src = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'),
                 src, flags=re.S)
    src = re.sub(r'//[^\n]*', '', src)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', src)


def graph(d):
    files = sorted(f for f in os.listdir(d) if f.endswith('.c'))
    text = {f: strip(open(os.path.join(d, f), errors='replace').read())
            for f in files}
    defines = {}
    for f, s in text.items():
        for m in re.finditer(r'^[a-z][\w \*]*?\b(\w+)\s*\([^;{]*\)\s*\{',
                             s, re.M):
            name = m.group(1)
            if not re.search(r'^static\b', m.group(0)):
                defines.setdefault(name, f)
    edges = {f: {} for f in files}
    for f, s in text.items():
        raw = open(os.path.join(d, f), errors='replace').read()
        for inc in re.findall(r'#include "([\w.]+)\.h"', raw):
            c = inc + '.c'
            if c in text and c != f:
                edges[f].setdefault(c, set()).add(f'#include "{inc}.h"')
        for name, g in defines.items():
            if g != f and re.search(r'\b' + re.escape(name) + r'\s*\(', s):
                edges[f].setdefault(g, set()).add(name + '()')
    return files, edges


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


def main():
    d = sys.argv[1]
    files, edges = graph(d)
    circles = sccs(files, edges)
    if not circles:
        print(f"check-layers: {d}: {len(files)} files, no circle")
        return 0
    for comp in circles:
        print(f"check-layers: {d}: a circle of {len(comp)} files: "
              f"{' '.join(comp)}")
        for a in comp:
            for b in comp:
                if b in edges[a]:
                    why = sorted(edges[a][b])
                    more = f" (+{len(why) - 4})" if len(why) > 4 else ""
                    print(f"  {a} -> {b}: {', '.join(why[:4])}{more}")
    return 1


if __name__ == '__main__':
    sys.exit(main())

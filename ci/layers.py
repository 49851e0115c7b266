#!/usr/bin/env python3
"""The layer check: libdetcheck's folders are layers, each may use only the
ones before it, and the files of one layer must not depend on each other in a
cycle.

    ci/layers.py [--all-objects] BUILD_DIR [SRC_DIR]

Reads `nm` of every object under BUILD_DIR/src/<layer>/ (and BUILD_DIR/cuda/,
the GPU layer's kernels) to find which file defines each global symbol and
which files use it, and the `#include "<layer>/..."` lines of every source
and header under SRC_DIR (default: src beside this script) for the same rule
at the header level. Objects whose source no longer exists (left behind in
a build folder) are ignored unless --all-objects. Prints every violation
and exits 1; 0 when clean.
"""
import collections
import os
import re
import subprocess
import sys

# Bottom to top. A file may use its own layer and the ones before it.
LAYERS = ["common", "core", "formats", "gpu", "hash", "diff", "runs", "train", "cli"]
RANK = {name: i for i, name in enumerate(LAYERS)}


def layer_of(path):
    parts = path.replace(os.sep, "/").split("/")
    if "cuda" in parts:
        return "gpu"
    if "src" in parts:
        i = len(parts) - 1 - parts[::-1].index("src")
        if i + 1 < len(parts) and parts[i + 1] in RANK:
            return parts[i + 1]
    return None


def source_of(rel, top):
    """The source an object was built from (src/x/y.o <- src/x/y.c,
    cuda/y.cu.o <- cuda/y.cu), or None when it no longer exists: objects
    left in a build folder by a file since moved or removed are not read."""
    base = rel[:-2]
    for cand in (base + ".c", base):
        if os.path.isfile(os.path.join(top, cand)):
            return cand
    return None


def objects(build, top):
    for root, _, files in os.walk(build):
        for f in sorted(files):
            if f.endswith(".o"):
                p = os.path.join(root, f)
                rel = os.path.relpath(p, build)
                if rel.split(os.sep)[0] in ("src", "cuda") and layer_of(rel) \
                        and (top is None or source_of(rel, top)):
                    yield p, rel


def symbol_graph(build, top=None):
    defined, used = {}, collections.defaultdict(set)
    files = []
    for path, rel in objects(build, top):
        files.append(rel)
        run = subprocess.run(["nm", path], capture_output=True, text=True)
        if run.returncode != 0:
            sys.stderr.write("layers: nm cannot read %s: %s\n" % (path, run.stderr.strip()))
            sys.exit(2)
        out = run.stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in "TDBRVWCG":
                defined.setdefault(f[2], rel)
            elif len(f) == 2 and f[0] == "U":
                used[rel].add(f[1])
    edges = collections.defaultdict(lambda: collections.defaultdict(list))
    for rel in files:
        for sym in sorted(used[rel]):
            d = defined.get(sym)
            if d and d != rel:
                edges[rel][d].append(sym)
    return files, edges


INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z]+)/([^"]+)"', re.M)


def include_graph(src):
    files, edges = [], collections.defaultdict(lambda: collections.defaultdict(list))
    for root, _, names in os.walk(src):
        for n in sorted(names):
            if not n.endswith((".c", ".h", ".cu", ".cuh")):
                continue
            p = os.path.join(root, n)
            rel = os.path.relpath(p, os.path.dirname(src))
            files.append(rel)
            with open(p, encoding="utf-8", errors="replace") as fh:
                for m in INCLUDE.finditer(fh.read()):
                    if m.group(1) in RANK:
                        edges[rel]["src/%s/%s" % (m.group(1), m.group(2))].append("#include")
    return files, edges


def check(files, edges, what):
    bad = []
    for a in sorted(edges):
        for b, why in sorted(edges[a].items()):
            la, lb = layer_of(a), layer_of(b)
            if la and lb and RANK[lb] > RANK[la]:
                bad.append("%s: %s (layer %s) uses %s (layer %s, above it): %s"
                           % (what, a, la, b, lb, ", ".join(why[:5])))
    # cycles among the files of one layer (Tarjan's strongly connected components)
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if layer_of(w) != layer_of(v):
                continue
            if w not in index:
                strong(w)
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
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(set(files) | set(edges)):
        if v not in index:
            strong(v)
    for comp in comps:
        detail = []
        for a in comp:
            for b in comp:
                if b in edges.get(a, {}):
                    detail.append("%s -> %s (%s)" % (a, b, ", ".join(edges[a][b][:3])))
        bad.append("%s: cycle in layer %s: %s" % (what, layer_of(comp[0]), "; ".join(detail)))
    return bad


def main():
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) < 1:
        sys.stderr.write("usage: ci/layers.py [--all-objects] BUILD_DIR [SRC_DIR]\n")
        return 2
    build = args[0]
    src = args[1] if len(args) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    src = os.path.normpath(src)
    # Objects are matched to sources under the tree that holds SRC_DIR
    # unless --all-objects (the test's planted objects have no source).
    top = None if "--all-objects" in flags else os.path.dirname(src)
    files, edges = symbol_graph(build, top)
    if not files:
        sys.stderr.write("layers: no objects under %s/src (build first)\n" % build)
        return 2
    bad = check(files, edges, "symbols")
    ifiles, iedges = include_graph(src)
    bad += check(ifiles, iedges, "includes")
    for b in bad:
        print(b)
    n = sum(len(v) for v in edges.values())
    print("layers: %d objects, %d file-to-file uses, %d source files: %s"
          % (len(files), n, len(ifiles), "%d violations" % len(bad) if bad else "ok"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""The package's modules form layers that point one way, as src/ does
(HACKING.md, ci/layers.py): each module imports only modules listed before
it in LAYERS, never one after it, so no two modules import each other.
Read from the sources with ast (every import, those inside functions
too), without importing anything."""
import ast
import os

PKG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "detcheck")

# bottom first: what each is, in the order a module may import them
LAYERS = [
    "_lib",          # the ctypes binding of libdetcheck
    "_files",        # files and locks: the Recorder's outputs, a run directory's .lock
    "_tensors",      # tensors: dtypes, dense row-major views
    "_shard",        # a sharded tensor's digest from each rank's shard
    "_digest",       # digest v1 of any tensor (streamed views, DTensors through _shard)
    "_state",        # digests of what a resume restores (RNG states, batches, lr, ...)
    "_manifest",     # manifests of live objects
    "_seal",         # sealed checkpoints: seal, verify_seal
    "_replica",      # the replica guard: data-parallel replicas compared during the run
    "_settings",     # determinism settings, run.json, the environment's recording switches
    "_trace",        # the trace writer: hooks, events, trace.bin records, dumps
    "_recorder",     # Recorder
    "_auto",         # autorecord: a Recorder at every optimizer.step()
    "_session",      # the resume contract of detcheck resume-check
    "_runs",         # recorded runs read and compared through libdetcheck
    "__main__",
    "__init__",
    "integrations.__init__",
    "integrations.hf",
    "integrations.lightning",
]


def _modules():
    out = {}
    for root, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(root, f), PKG)[:-3].replace(os.sep, ".")
                out[rel] = os.path.join(root, f)
    return out


def _resolve(parts, mods):
    """Package parts to the module they name (a package: its __init__), or
    None."""
    dotted = ".".join(parts)
    for cand in (dotted, (dotted + "." if dotted else "") + "__init__"):
        if cand in mods:
            return cand
    return None


def imports_of(mod, path):
    """The package's modules that mod imports (anywhere in its file)."""
    mods = _modules()
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    out = set()

    def add(parts, names):
        target = _resolve(parts, mods)
        for a in names:  # from . import _lib: a module of the package
            sub = _resolve(parts + [a], mods)
            if sub is not None:
                out.add(sub)
            elif target is not None:
                out.add(target)  # a name defined in that module (or package)
        if not names and target is not None:
            out.add(target)

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if node.level:
                base = mod.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                add(base + (node.module.split(".") if node.module else []), names)
            elif node.module == "detcheck" or (node.module or "").startswith("detcheck."):
                add(node.module.split(".")[1:], names)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "detcheck" or a.name.startswith("detcheck."):
                    add(a.name.split(".")[1:], [])
    out.discard(mod)
    return out


def graph():
    return {m: imports_of(m, p) for m, p in _modules().items()}


def find_cycle(g):
    """One cycle of g as a list of modules, or None."""
    state, stack = {}, []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(g.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                c = visit(n)
                if c:
                    return c
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(g):
        if m not in state:
            c = visit(m)
            if c:
                return c
    return None


def test_no_import_cycle():
    c = find_cycle(graph())
    assert c is None, "import cycle: " + " -> ".join(c)


def test_every_module_has_a_layer():
    assert sorted(_modules()) == sorted(LAYERS), "modules not in LAYERS (or gone): %s" % (
        sorted(set(_modules()) ^ set(LAYERS)))


def test_imports_point_down():
    rank = {m: i for i, m in enumerate(LAYERS)}
    up = ["%s imports %s" % (m, n) for m, deps in sorted(graph().items()) for n in sorted(deps)
          if m in rank and n in rank and rank[n] >= rank[m]]
    assert not up, "imports up a layer: " + "; ".join(up)


def test_the_check_finds_planted_cycles(tmp_path):
    # the checker itself can fail: a cycle of two and one of three
    assert find_cycle({"a": {"b"}, "b": {"a"}}) in (["a", "b", "a"], ["b", "a", "b"])
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    # and sees imports inside functions (as _digest's of _shard were), in
    # every form the package uses
    p = tmp_path / "planted.py"
    p.write_text("import os\nfrom . import _lib\n\ndef f():\n    from ._shard import digest_dtensor\n"
                 "    import detcheck._state\n    from detcheck import _files\n")
    assert imports_of("_digest", str(p)) == {"_lib", "_shard", "_state", "_files"}
    p.write_text("from .._recorder import Recorder\nfrom . import hf\n")
    assert imports_of("integrations.lightning", str(p)) == {"_recorder", "integrations.hf"}

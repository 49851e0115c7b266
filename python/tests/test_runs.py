"""read_digests against `detcheck bisect`: tensor_digests.bin files built
byte by byte; the package refuses what the command line refuses, with its
message (both read through libdetcheck's dck_recording_load), and reads
what it reads."""
import os
import struct

import pytest

import detcheck
from conftest import run_cli

HDR = b"DCKTDIG\0" + struct.pack("<II", 1, 0)


def _name(i, kind, nm):
    return struct.pack("<BIBH", 1, i, kind, len(nm)) + nm


def _step(step, ids, digest=(1, 2)):
    return struct.pack("<BqI", 2, step, len(ids)) + b"".join(struct.pack("<IQQ", i, *digest) for i in ids)


GOOD = HDR + _name(0, 0, b"w") + _name(1, 2, b"w.exp_avg") + _name(2, 3, b"rng.torch") + _step(1, [2, 0, 1])

CASES = [
    ("valid", GOOD),
    ("torn", GOOD + _step(2, [0, 1])[:-3]),
    ("magic", b"NOTMAGIC" + GOOD[8:]),
    ("short", b"DCKT"),
    ("version", GOOD[:8] + struct.pack("<I", 2) + GOOD[12:]),
    ("flags", GOOD[:12] + struct.pack("<I", 1) + GOOD[16:]),
    ("type", GOOD + b"\x07"),
    ("id", HDR + _name(1, 0, b"w")),
    ("kind", HDR + _name(0, 9, b"w")),
    ("utf8", HDR + _name(0, 0, b"a\xff\xfe")),
    ("nul", HDR + _name(0, 0, b"a\0b")),
    ("order", GOOD + _step(1, [0])),
    ("never named", HDR + _name(0, 0, b"w") + _step(1, [5])),
    ("listed twice", HDR + _name(0, 0, b"w") + _name(1, 1, b"w") + _step(1, [0, 0])),
    ("named twice", HDR + _name(0, 2, b"w") + _name(1, 2, b"w")),
    ("huge count", HDR + _name(0, 0, b"w") + struct.pack("<BqI", 2, 1, 0xFFFFFFFF) + b"\0" * 40),
]


def _runs(tmp_path, data):
    """Two run directories with equal trajectories: A holds data as its
    side file, B a valid one."""
    dirs = []
    for k, body in enumerate((data, GOOD)):
        d = tmp_path / ("run%d" % k)
        d.mkdir()
        with open(d / "trajectory.jsonl", "w") as f:
            f.write('{"step":1,"loss":1,"loss_bits":"3f800000","grad_norm":1,'
                    '"grad_norm_bits":"3f800000","lr":0.1}\n')
        (d / "tensor_digests.bin").write_bytes(body)
        dirs.append(str(d))
    return dirs


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_read_digests_refuses_what_bisect_refuses(tmp_path, case):
    a, b = _runs(tmp_path, dict(CASES)[case])
    try:
        got = detcheck.read_digests(a)
        py = None
    except ValueError as e:
        got, py = None, str(e)
    r = run_cli("bisect", a, b, check=False)
    pre = "detcheck bisect: error: "
    cli = next((x[len(pre):] for x in r.stderr.splitlines() if x.startswith(pre)), None)
    assert py == cli, "python: %r\ncli (exit %d): %r\n%s" % (py, r.returncode, cli, r.stderr)
    if py is not None:
        assert py.startswith(os.path.join(a, "tensor_digests.bin") + ": ") and r.returncode == 2
    else:
        assert r.returncode in (0, 1), r.stderr
        # state first, in file order otherwise; the torn step is dropped
        assert got == {1: [("state", "rng.torch", "%016x%016x" % (1, 2)), ("gradient", "w", "%016x%016x" % (1, 2)),
                           ("optimizer", "w.exp_avg", "%016x%016x" % (1, 2))]}


def test_readers_refuse_a_missing_file(tmp_path):
    with pytest.raises(ValueError, match=r"tensor_digests\.bin: cannot open"):
        detcheck.read_digests(tmp_path)
    with pytest.raises(ValueError, match=r"trace\.bin: cannot open"):
        detcheck.read_trace(tmp_path)


# ---------------------------------------------------------------- compare_runs

def test_compare_runs_structs_mirror_the_header(tmp_path):
    """_lib's ctypes mirror of dck_runs_result (detcheck_static.h) has the
    C compiler's sizes and offsets: a field out of place would read another
    field's bytes as a verdict."""
    import ctypes
    import shutil
    import subprocess
    from detcheck import _lib
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to read the header's layout")
    inc = os.path.join(os.path.dirname(__file__), "..", "..", "include")
    structs = {"dck_runs_result": _lib.RunsResult, "dck_runs_trace": _lib.RunsTrace,
               "dck_runs_gap": _lib.RunsGap, "dck_runs_event": _lib.RunsEvent, "dck_runs_opts": _lib.RunsOpts,
               "dck_replica_result": _lib.ReplicaResult, "dck_replica_group": _lib.ReplicaGroup}
    lines = []
    for cname, py in structs.items():
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (cname, cname))
        for f in py._fields_:
            lines.append('printf("%s %s %%zu\\n", offsetof(%s, %s));' % (cname, f[0], cname, f[0]))
    src = tmp_path / "layout.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "detcheck_static.h"\n'
                   'int main(void) {\n%s\nreturn 0;\n}\n' % "\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-I", inc, str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split("\n")
    want = {}
    for ln in out:
        if ln:
            s, f, v = ln.split()
            want[(s, f)] = int(v)
    for cname, py in structs.items():
        assert ctypes.sizeof(py) == want[(cname, "sizeof")], cname
        for f in py._fields_:
            assert getattr(py, f[0]).offset == want[(cname, f[0])], (cname, f[0])


def _traj(d, steps, loss_bits=lambda s: "3f800000"):
    d.mkdir(exist_ok=True)
    with open(d / "trajectory.jsonl", "w") as f:
        for s in steps:
            f.write('{"step":%d,"loss":1,"loss_bits":"%s","grad_norm":1,"grad_norm_bits":"3f800000",'
                    '"lr":0.1}\n' % (s, loss_bits(s)))
    return str(d)


def _bisect(a, b, *flags):
    import json
    r = run_cli("bisect", "--json", *flags, a, b, check=False)
    return r.returncode, (json.loads(r.stdout) if r.returncode in (0, 1) else r.stderr)


def test_compare_runs_says_what_bisect_says(tmp_path):
    """The same comparison in process: the verdict, the first differing
    step and source, and what was not compared, as bisect --json has them;
    an OK only with evidence, what one run lacks never part of it."""
    same_a, same_b = _traj(tmp_path / "sa", [1, 2, 3]), _traj(tmp_path / "sb", [1, 2, 3])
    diff_b = _traj(tmp_path / "db", [1, 2, 3], lambda s: "3f800001" if s >= 2 else "3f800000")
    long_a = _traj(tmp_path / "la", [1, 2, 3, 4, 5])
    for a, b, flags in ((same_a, same_b, ()), (same_a, diff_b, ()), (long_a, same_b, ()),
                        (long_a, same_b, ("--allow-partial",))):
        got = detcheck.compare_runs(a, b, allow_partial=bool(flags))
        rc, doc = _bisect(a, b, *flags)
        assert got.different == (rc == 1), (a, b, flags, doc)
        assert got.same == (rc == 0)
        assert got.first_step == doc["first_differing_step"]
        assert got.first_differing == doc["first_differing"]
        assert [(g["item"], g["run"], g["count"]) for g in got.not_compared] == \
            [(g["item"], g["run"], g["count"]) for g in doc["not_compared"]], doc["not_compared"]
    got = detcheck.compare_runs(same_a, diff_b)
    assert got.trajectory == {"step": 2, "detail": "loss_bits 3f800000 vs 3f800001"}
    assert got.different and got.first_step == 2 and got.first_differing == "trajectory"
    assert detcheck.compare_runs(same_a, same_b).same
    # steps 4 and 5 of run A were never compared: different unless accepted
    part = detcheck.compare_runs(long_a, same_b)
    assert part.different and not part.found and part.not_compared[0]["item"] == "trajectory_steps"
    assert (part.not_compared[0]["run"], part.not_compared[0]["first"], part.not_compared[0]["last"]) == ("A", 4, 5)
    assert detcheck.compare_runs(long_a, same_b, allow_partial=True).same


def test_compare_runs_names_the_first_differing_tensor(tmp_path):
    a, b = _traj(tmp_path / "a", [1]), _traj(tmp_path / "b", [1])
    (tmp_path / "a" / "tensor_digests.bin").write_bytes(GOOD)
    (tmp_path / "b" / "tensor_digests.bin").write_bytes(
        HDR + _name(0, 0, b"w") + _name(1, 2, b"w.exp_avg") + _name(2, 3, b"rng.torch")
        + _step(1, [2, 1]))  # no gradient "w": only in A
    got = detcheck.compare_runs(a, b)
    rc, doc = _bisect(a, b)
    assert rc == 1 and got.different
    assert got.tensor == {"step": 1, "kind": "gradient", "name": "w", "how": "only in A"}, got.tensor
    assert got.first_differing == doc["first_differing"] == "tensor"


def test_compare_runs_refuses_what_bisect_refuses(tmp_path):
    a = _traj(tmp_path / "a", [1, 2])
    bad = tmp_path / "b"
    bad.mkdir()
    (bad / "trajectory.jsonl").write_text('{"step":1,"loss":1}\nnot json\n{"step":3}\n')
    rc, err = _bisect(a, str(bad))
    assert rc == 2
    with pytest.raises(ValueError) as e:
        detcheck.compare_runs(a, str(bad))
    assert "detcheck bisect: error: " + str(e.value) in err
    with pytest.raises(ValueError, match="no-such-run"):
        detcheck.compare_runs(a, str(tmp_path / "no-such-run"))

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

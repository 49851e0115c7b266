"""detcheck.hash_files: the manifest `detcheck hash` writes for checkpoint
files, through libdetcheck's dck_hash_paths, with no NumPy or torch."""
import json
import os
import subprocess
import sys

import pytest

import detcheck
from conftest import cli_hash, cli_tensors, cli_values, run_cli

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures")


def fixture(name):
    return os.path.join(FIXTURES, name)


@pytest.mark.parametrize("name", ["array.safetensors", "dtypes.pt", "training.pt", "array.npy",
                                  "megatron_tp2pp2"])
def test_same_as_cli(name):
    path = fixture(name)
    m = detcheck.hash_files(path)
    doc = cli_hash(path)
    assert m.tensors == cli_tensors(doc)
    assert m.values == cli_values(doc)
    assert m.root == doc["root"]
    assert m.tensors, "the fixture holds tensors"


def test_saved_as_cli(tmp_path):
    """save() writes what `detcheck hash -o` writes (but the time it was made)."""
    path = fixture("training.pt")
    ours = detcheck.hash_files(path, threads=1).save(str(tmp_path / "py.yaml"))
    run_cli("hash", "-q", path, "-o", tmp_path / "cli.yaml")

    def lines(p):
        with open(p) as f:
            return [line for line in f if not line.startswith("created:")]
    assert lines(ours) == lines(tmp_path / "cli.yaml")
    # files=False: no whole-file hashes (--no-files)
    detcheck.hash_files(path, files=False).save(str(tmp_path / "nofiles.yaml"))
    assert "xxh128" in "".join(lines(ours)) and "xxh128" not in "".join(lines(tmp_path / "nofiles.yaml"))


def test_shards_and_notices(tmp_path):
    """Several paths are shards of one checkpoint; a directory's file that is
    no checkpoint is a notice, as the CLI's note."""
    (tmp_path / "ck").mkdir()
    with open(fixture("array.safetensors"), "rb") as f, open(tmp_path / "ck" / "model.safetensors", "wb") as g:
        g.write(f.read())
    (tmp_path / "ck" / "notes.txt").write_text("not a checkpoint\n")
    m = detcheck.hash_files(tmp_path / "ck")
    assert m.tensors == cli_tensors(cli_hash(tmp_path / "ck"))
    assert m.notices == ["%s: skipped (not a checkpoint file)" % (tmp_path / "ck" / "notes.txt")]
    assert detcheck.hash_files(fixture("array.safetensors")).notices == []
    both = detcheck.hash_files(fixture("array.safetensors"), fixture("dtypes.safetensors"))
    assert both.tensors == cli_tensors(cli_hash_args(fixture("array.safetensors"), fixture("dtypes.safetensors")))


@pytest.mark.parametrize("case", ["missing", "cut", "directory"])
def test_errors_are_the_library_s(tmp_path, case):
    """Input it cannot read: DetcheckError with the message `detcheck hash`
    prints (naming the file and the problem)."""
    if case == "missing":
        path = tmp_path / "absent.safetensors"
    elif case == "cut":
        path = tmp_path / "cut.safetensors"
        with open(fixture("array.safetensors"), "rb") as f:
            path.write_bytes(f.read()[:100])
    else:
        path = tmp_path / "empty"
        path.mkdir()
    with pytest.raises(detcheck.DetcheckError) as e:
        detcheck.hash_files(path)
    cli = run_cli("hash", "-q", path, check=False)
    assert cli.returncode == 2
    assert cli.stderr.strip() == "detcheck hash: error: %s" % e.value
    assert str(path) in str(e.value)


def test_arguments():
    with pytest.raises(ValueError, match="no path"):
        detcheck.hash_files()
    with pytest.raises(ValueError, match="megatron_merge=False"):
        detcheck.hash_files(fixture("megatron_tp2pp2"), megatron_merge=False, tp_split=["*.weight=0"])
    per_rank = detcheck.hash_files(fixture("megatron_tp2pp2"), megatron_merge=False)
    doc = cli_hash_args("--megatron-per-rank", fixture("megatron_tp2pp2"))
    assert per_rank.tensors == cli_tensors(doc)


def cli_hash_args(*args):
    return json.loads(run_cli("hash", "--json", "-q", *args).stdout)


def test_without_numpy_and_torch():
    """A bare environment: numpy and torch cannot be imported, hash_files
    still works (the wheel installs without them)."""
    code = ("import sys; sys.modules['numpy'] = None; sys.modules['torch'] = None\n"
            "import detcheck\n"
            "m = detcheck.hash_files(sys.argv[1])\n"
            "print(m.root)\n")
    r = subprocess.run([sys.executable, "-c", code, fixture("dtypes.pt")], capture_output=True, text=True,
                       env=os.environ)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == cli_hash(fixture("dtypes.pt"))["root"]

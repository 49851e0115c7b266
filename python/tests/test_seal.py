"""Sealed checkpoints with the real libraries: DCP checkpoints of DTensor
state (FSDP2 model and AdamW state through get_state_dict) saved by 4 gloo
ranks and sealed, loaded by 2 and by 1: verify_seal passes and `detcheck
verify --seal` of the files passes; a flipped byte in one .distcp file, the
optimizer state not loaded, the RNG state not restored, another step's
checkpoint, an unsealed checkpoint: each named. torch.save files too."""
import io
import json
import os
import shutil
import sys
import warnings
import zipfile

import pytest
import torch

import detcheck
from conftest import cli_tensors, cli_values, fork_ranks, run_cli

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import seal_worker  # noqa: E402

def ranks(tmp_path, world, target, **kw):
    """Runs target on world forked gloo ranks; returns their JSON outputs."""
    return [json.load(open(o)) for o in fork_ranks(tmp_path, world, target, **kw)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Checkpoints of steps 3 and 4, saved and sealed by 4 ranks."""
    d = tmp_path_factory.mktemp("seal")
    out = {}
    for steps in (3, 4):
        path = str(d / ("step_%d" % steps))
        res = ranks(d, 4, seal_worker.save, path=path, steps=steps)
        assert len({r["root"] for r in res}) == 1, res  # every rank returns the same seal
        out[steps] = (path, res[0])
    return out


def seal_doc(path):
    return detcheck.Manifest.load(os.path.join(path, "detcheck-seal.yaml"))


def test_seal_names_what_hash_reads(saved):
    """The memory seal holds exactly what `detcheck hash` reads from the files."""
    path, res = saved[3]
    m = seal_doc(path)
    doc = json.loads(run_cli("hash", "--json", path).stdout)
    files = {n: v[1:] for n, v in cli_tensors(doc).items()}
    assert {n: (v[1], v[2], v[3]) for n, v in m.tensors.items()} == files
    assert m.values == cli_values(doc)
    assert m.root == doc["root"] == res["root"]
    assert res["rng"] == ["rng"]
    names = set(m.tensors)
    assert {"model.0.weight", "model.2.bias", "optim.state.0.weight.exp_avg", "rng"} <= names, sorted(names)
    assert m.tensors["model.0.weight"][2] == (53, 37)
    r = run_cli("verify", "--seal", path)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("world", [2, 1])
def test_resume_on_fewer_ranks(saved, tmp_path, world):
    path, res = saved[3]
    out = ranks(tmp_path, world, seal_worker.resume, path=path)
    for r in out:
        assert r["ok"], r
        assert r["root"] == res["root"] and r["rng"] == ["rng"]


def _flip_tensor_byte(path, fqn):
    """Flips one byte of fqn's data in the first .distcp file holding it;
    returns that file's name."""
    from torch.distributed.checkpoint import FileSystemReader
    md = FileSystemReader(path).read_metadata()
    idx, info = next((i, s) for i, s in sorted(md.storage_data.items(), key=lambda kv: kv[1].relative_path)
                     if i.fqn == fqn)
    f = os.path.join(path, info.relative_path)
    blob = open(f, "rb").read()
    region = blob[info.offset:info.offset + info.length]
    z = zipfile.ZipFile(io.BytesIO(region))
    zi = next(i for i in z.infolist() if i.filename.endswith("/data/0"))
    head = region[zi.header_offset:zi.header_offset + 30]
    start = zi.header_offset + 30 + int.from_bytes(head[26:28], "little") + int.from_bytes(head[28:30], "little")
    at = info.offset + start + zi.file_size // 2
    b = bytearray(blob)
    b[at] ^= 0x10
    open(f, "wb").write(bytes(b))
    return info.relative_path


def test_flipped_byte_named(saved, tmp_path):
    src, _ = saved[3]
    path = str(tmp_path / "step_3")
    shutil.copytree(src, path)
    bad = _flip_tensor_byte(path, "model.0.weight")
    out = ranks(tmp_path, 2, seal_worker.resume, path=path)
    for r in out:
        assert not r["ok"] and r["kind"] == "differs" and r["tensor"] == "model.0.weight", r
        assert bad in r["files"] and bad in r["msg"], r
    cli = run_cli("verify", "--seal", path)
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "model.0.weight" in cli.stdout and bad in cli.stdout, cli.stdout


def test_optimizer_not_loaded(saved, tmp_path):
    path, _ = saved[3]
    for r in ranks(tmp_path, 2, seal_worker.resume, path=path, mode="no_optim"):
        assert not r["ok"] and r["kind"] == "differs" and r["tensor"].startswith("optim.state."), r


def test_rng_not_restored(saved, tmp_path):
    path, _ = saved[3]
    for r in ranks(tmp_path, 2, seal_worker.resume, path=path, mode="no_rng"):
        assert not r["ok"] and r["tensor"] == "rng" and "not restored" in r["msg"], r


def test_other_steps_checkpoint(saved, tmp_path):
    """The state of step 4 loaded, checked against step 3's seal."""
    p3, _ = saved[3]
    p4, _ = saved[4]
    mixed = str(tmp_path / "step_3")
    shutil.copytree(p4, mixed)
    shutil.copy(os.path.join(p3, "detcheck-seal.yaml"), os.path.join(mixed, "detcheck-seal.yaml"))
    for r in ranks(tmp_path, 1, seal_worker.resume, path=mixed):
        assert not r["ok"] and r["kind"] == "differs", r


def test_unsealed(saved, tmp_path):
    """A save killed before the seal: verify_seal refuses it, require=False warns."""
    src, _ = saved[3]
    path = str(tmp_path / "step_3")
    shutil.copytree(src, path)
    os.unlink(os.path.join(path, "detcheck-seal.yaml"))
    state = {"x": torch.zeros(3)}
    with pytest.raises(detcheck.SealError) as e:
        detcheck.verify_seal(path, state)
    assert e.value.kind == "unsealed" and "not sealed" in str(e.value)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = detcheck.verify_seal(path, state, require=False)
    assert not res and not res.sealed and any("not sealed" in str(x.message) for x in w)
    assert run_cli("verify", "--seal", path, check=False).returncode == 2


def test_torch_save_file(tmp_path):
    """A plain torch.save file: sealed beside it, verified after torch.load,
    by the CLI too; a changed tensor, a missing and an extra entry named."""
    torch.manual_seed(3)
    m = torch.nn.Linear(31, 7)
    opt = torch.optim.Adam(m.parameters())
    m(torch.randn(2, 31)).sum().backward()
    opt.step()
    state = {"model": m.state_dict(), "opt": opt.state_dict(), "step": 17, "rng": torch.get_rng_state()}
    p = str(tmp_path / "ckpt.pt")
    torch.save(state, p)
    res = detcheck.seal(p, state, step=17)
    assert res.seal_path == p + ".detcheck-seal.yaml" and os.path.isfile(res.seal_path)
    assert res.rng_checked == ["rng"]
    loaded = torch.load(p, weights_only=True)
    torch.set_rng_state(loaded["rng"])
    ok = detcheck.verify_seal(p, loaded)
    assert ok and ok.tensors_compared == len(detcheck.manifest(state).tensors)
    assert run_cli("verify", "--seal", p).returncode == 0
    loaded["model"]["weight"][3, 5] += 1
    with pytest.raises(detcheck.SealError) as e:
        detcheck.verify_seal(p, loaded)
    assert e.value.tensor == "model.weight" and e.value.kind == "differs" and "ckpt.pt" in str(e.value)
    loaded = torch.load(p, weights_only=True)
    torch.set_rng_state(loaded["rng"])
    del loaded["model"]["bias"]
    with pytest.raises(detcheck.SealError) as e:
        detcheck.verify_seal(p, loaded)
    assert (e.value.tensor, e.value.kind) == ("model.bias", "missing")
    loaded["model"]["bias"] = torch.zeros(7)
    loaded["model"]["extra"] = torch.zeros(2)
    with pytest.raises(detcheck.SealError) as e:
        detcheck.verify_seal(p, loaded)
    assert ("model.extra", "extra") in e.value.differences


def test_seal_never_replaces_other_files(tmp_path):
    p = str(tmp_path / "w.pt")
    state = {"w": torch.arange(5.0)}
    torch.save(state, p)
    sp = p + ".detcheck-seal.yaml"
    open(sp, "w").write("my notes\n")
    with pytest.raises(detcheck.SealError) as e:
        detcheck.seal(p, state)
    assert sp in str(e.value)
    assert open(sp).read() == "my notes\n"
    os.unlink(sp)
    os.symlink(str(tmp_path / "elsewhere"), sp)
    with pytest.raises(detcheck.SealError):
        detcheck.seal(p, state)
    assert not os.path.exists(tmp_path / "elsewhere")
    os.unlink(sp)
    detcheck.seal(p, state)
    detcheck.seal(p, state, step=2)  # an earlier seal is replaced
    assert detcheck.verify_seal(p, state).step == 2
    with pytest.raises(detcheck.SealError):
        detcheck.seal(str(tmp_path / "never_written.pt"), state)


def test_bad_seals_refused(tmp_path):
    """A FIFO, a link, a manifest that is not a seal, garbage: SealError naming
    the seal's path, never a hang or a pass."""
    p = str(tmp_path / "w.pt")
    state = {"w": torch.arange(7.0)}
    torch.save(state, p)
    sp = p + ".detcheck-seal.yaml"
    os.mkfifo(sp)
    for call in (lambda: detcheck.verify_seal(p, state), lambda: detcheck.seal(p, state)):
        with pytest.raises(detcheck.SealError) as e:
            call()
        assert sp in str(e.value)
    os.unlink(sp)
    detcheck.manifest(state).save(sp)  # a manifest, not a seal
    with pytest.raises(detcheck.SealError) as e:
        detcheck.verify_seal(p, state)
    assert "not a detcheck seal" in str(e.value)
    open(sp, "w").write("\x00garbage")
    with pytest.raises(detcheck.SealError):
        detcheck.verify_seal(p, state)
    os.unlink(sp)
    detcheck.seal(p, state)
    real = str(tmp_path / "real.yaml")
    os.rename(sp, real)
    os.symlink(real, sp)
    with pytest.raises(detcheck.SealError):
        detcheck.verify_seal(p, state)

"""Sealed checkpoints through the framework callbacks, with tiny real runs:
the transformers Trainer's checkpoint-N directories and Lightning's .ckpt
files are sealed from memory at each save, the seal is exactly what
``detcheck hash`` / ``verify --seal`` read from the files, and a resumed
run is checked against it (a flipped byte of tensor data, an unsealed
checkpoint, RNG states the Trainer did not restore). Session.stopped
(state=) seals, Session.resumed verifies."""
import json
import os
import shutil
import warnings
import zipfile

import pytest
import torch

import detcheck
from conftest import (cli_hash, cli_tensors, cli_values, fork_ranks, free_port, hf_preload, hf_rank_env, run_cli,
                      lightning_linear)

SEAL = "detcheck-seal.yaml"


def flip_tensor_byte(path):
    """Flips one bit in the middle of the largest tensor record of a
    torch.save zip; returns the record's name."""
    with zipfile.ZipFile(path) as z:
        info = max((i for i in z.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_len, extra_len = (int.from_bytes(f.read(2), "little") for _ in range(2))
        at = info.header_offset + 30 + name_len + extra_len + info.file_size // 2
        f.seek(at)
        b = f.read(1)[0]
        f.seek(at)
        f.write(bytes([b ^ 0x10]))
    return info.filename


def seal_is_hash(ckpt, seal_file):
    """The seal names, groups, digests and values exactly what `detcheck
    hash` reads from the files, and `detcheck verify --seal` exits 0."""
    sealed = detcheck.Manifest.load(seal_file)
    doc = cli_hash(ckpt)
    assert {n: (g, dt, tuple(s), d) for n, (g, dt, s, d) in sealed.tensors.items()} == cli_tensors(doc)
    assert sealed.values == cli_values(doc)
    assert sealed.root == doc["root"]
    r = run_cli("verify", "--seal", ckpt)
    assert r.returncode == 0, r.stdout + r.stderr
    return sealed


# ---------------------------------------------------------------- transformers Trainer

def hf_train(out, max_steps, resume=None, optimizers=None, before=(), ddp_backend=None, **cb_kwargs):
    """A tiny GPT-2 trained max_steps steps of 4 samples a process (2 steps
    an epoch on one), saving checkpoint-N every step; returns the callback.
    ddp_backend: as TrainingArguments' (a process of several)."""
    transformers = pytest.importorskip("transformers")
    from detcheck.integrations.hf import DetcheckCallback
    transformers.set_seed(0)
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(1)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (8, 16), generator=g)]
    args = transformers.TrainingArguments(output_dir=str(out), max_steps=max_steps, per_device_train_batch_size=4,
                                          use_cpu=True, report_to=[], save_strategy="steps", save_steps=1,
                                          logging_strategy="no", seed=0, data_seed=0, dataloader_num_workers=0,
                                          disable_tqdm=True, **({"ddp_backend": ddp_backend} if ddp_backend else {}))
    cb = DetcheckCallback(**cb_kwargs)
    kw = {"optimizers": optimizers(model)} if optimizers else {}
    transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=list(before) + [cb], **kw).train(
        resume_from_checkpoint=resume and str(resume))
    return cb


@pytest.fixture(scope="module")
def hf_run(tmp_path_factory):
    """checkpoint-1 (mid-epoch), -2 (an epoch's end), -3, each sealed."""
    out = tmp_path_factory.mktemp("hf") / "out"
    hf_train(out, 3)
    return out


def copy_run(run, tmp_path):
    dst = tmp_path / "out"
    shutil.copytree(run, dst)
    return dst


def test_hf_checkpoints_sealed_from_memory(hf_run):
    for n in (1, 2, 3):
        ckpt = hf_run / ("checkpoint-%d" % n)
        sealed = seal_is_hash(ckpt, ckpt / SEAL)
        assert {"transformer.wte.weight", "state.0.exp_avg", "cpu"} <= set(sealed.tensors)
        assert {"last_epoch", "learning_rate", "python.1"} <= set(sealed.values)
        assert "lm_head.weight" not in sealed.tensors  # tied to wte: not in the safetensors
        text = (ckpt / SEAL).read_text()
        assert "seal_from: memory" in text and 'seal_step: "%d"' % n in text


@pytest.mark.parametrize("step", [1, 2])  # the RNG restored after the skipped batches / at the epoch's start
def test_hf_resume_verified(hf_run, tmp_path, step):
    out = copy_run(hf_run, tmp_path)
    cb = hf_train(out, 4, resume=out / ("checkpoint-%d" % step))
    r = cb.seal_result
    assert r is not None and r.sealed and r.tensors_compared == len(detcheck.Manifest.load(
        out / ("checkpoint-%d" % step) / SEAL).tensors)
    seal_is_hash(out / "checkpoint-4", out / "checkpoint-4" / SEAL)  # the resumed run seals its own


def test_hf_corrupt_optimizer_refused(hf_run, tmp_path):
    out = copy_run(hf_run, tmp_path)
    ckpt = out / "checkpoint-2"
    flip_tensor_byte(ckpt / "optimizer.pt")
    r = run_cli("verify", "--seal", ckpt)
    assert r.returncode == 1, r.stdout + r.stderr
    with pytest.raises(detcheck.SealError) as e:
        hf_train(out, 4, resume=ckpt)
    assert e.value.kind == "differs" and e.value.tensor.startswith("state.") and e.value.tensor in r.stdout
    assert e.value.files == ["optimizer.pt"] and "optimizer.pt" in str(e.value)


def test_hf_rng_not_restored_named(hf_run, tmp_path, monkeypatch):
    """A Trainer that loads the checkpoint but does not restore its RNG
    states: the check right after that step names them."""
    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(transformers.Trainer, "_load_rng_state", lambda self, checkpoint: None)
    out = copy_run(hf_run, tmp_path)
    with pytest.raises(detcheck.SealError) as e:
        hf_train(out, 4, resume=out / "checkpoint-1")
    assert e.value.files == ["rng_state.pth"] and e.value.kind == "differs", str(e.value)


def test_hf_unsealed_refused_unless_not_required(hf_run, tmp_path):
    out = copy_run(hf_run, tmp_path)
    ckpt = out / "checkpoint-2"
    os.unlink(ckpt / SEAL)
    with pytest.raises(detcheck.SealError) as e:
        hf_train(out, 4, resume=ckpt)
    assert e.value.kind == "unsealed" and str(ckpt) in str(e.value)
    with pytest.warns(UserWarning, match="not sealed"):
        cb = hf_train(out, 4, resume=ckpt, require_seal=False)
    assert cb.seal_result is not None and not cb.seal_result.sealed


def test_hf_seal_false(tmp_path):
    out = tmp_path / "out"
    hf_train(out, 1, seal=False)
    assert not (out / "checkpoint-1" / SEAL).exists()


def test_hf_unknown_file_left_unsealed(tmp_path):
    """A checkpoint file the callback does not rebuild from memory (here
    written by another callback's on_save): never a seal that the files
    would not match, but a warning naming it."""
    transformers = pytest.importorskip("transformers")

    class Extra(transformers.TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            torch.save({"x": torch.ones(2)}, os.path.join(args.output_dir, "checkpoint-%d" % state.global_step,
                                                          "extra.pt"))
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="not sealed: files this callback does not rebuild from memory: extra.pt"):
        hf_train(out, 1, before=[Extra()])
    assert not (out / "checkpoint-1" / SEAL).exists()


def test_hf_colliding_names_namespaced(tmp_path):
    """A scheduler whose state holds a name training_args.bin holds too:
    the directory reader reads both files under their stems
    (scheduler.learning_rate, training_args.learning_rate), and so does the
    seal."""
    class Sched(torch.optim.lr_scheduler.LambdaLR):
        def __init__(self, opt):
            self.learning_rate = 0.5
            super().__init__(opt, lambda s: 1.0)

    def optimizers(model):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        return opt, Sched(opt)
    out = tmp_path / "out"
    hf_train(out, 1, optimizers=optimizers)
    ckpt = out / "checkpoint-1"
    sealed = seal_is_hash(ckpt, ckpt / SEAL)
    assert {"scheduler.learning_rate", "training_args.learning_rate"} <= set(sealed.values)
    cb = hf_train(out, 2, resume=ckpt, optimizers=optimizers)
    assert cb.seal_result.sealed


# ---------------------------------------------------------------- transformers Trainer, DDP

def hf_ddp_rank(rank, world, init, out, port, run, max_steps, resume=None, no_rng_on=None, fail_on=None):
    """hf_train as rank ``rank`` of ``world`` DDP processes (accelerate,
    gloo) into ``run``, each rank's RNG states its own (the Trainer seeds
    them alike); rank ``no_rng_on``'s Trainer does not restore its RNG
    states; rank ``fail_on``'s callback fails to read its RNG states.
    Writes what the callback found: its seal_result or what it raised."""
    hf_rank_env(rank, world, port)
    import random
    import numpy as np
    import transformers
    import torch.distributed as dist
    if rank == no_rng_on:
        transformers.Trainer._load_rng_state = lambda self, checkpoint: None
    if rank == fail_on:
        import detcheck.integrations.hf as hf

        def broken(args):
            raise OSError("no RNG here")
        hf._rng_states = broken

    class Apart(transformers.TrainerCallback):
        def on_train_begin(self, *a, **kw):  # a resume restores them afterwards
            for _ in range(rank + 1):
                random.random(), np.random.rand(), torch.rand(1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = hf_train(run, max_steps, resume=resume, before=[Apart()], ddp_backend="gloo").seal_result
        found = {"sealed": r.sealed, "not_compared": r.not_compared} if r is not None else None
    except detcheck.SealError as e:
        found = {"error": {"kind": e.kind, "tensor": e.tensor, "files": e.files, "message": str(e)}}
    except Exception as e:  # noqa: BLE001
        found = {"raised": "%s: %s" % (type(e).__name__, e)}
    json.dump(found, open(out, "w"))
    dist.destroy_process_group()


def hf_ddp(tmp_path, run, max_steps, **kw):
    return [json.load(open(o)) for o in fork_ranks(tmp_path, 2, hf_ddp_rank, port=free_port(), run=str(run),
                                                   max_steps=max_steps, **kw)]


@pytest.fixture(scope="module")
def hf_ddp_run(tmp_path_factory):
    """checkpoint-1 and -2 saved by 2 DDP processes (1 step an epoch)."""
    hf_preload()
    d = tmp_path_factory.mktemp("hfddp")
    assert hf_ddp(d, d / "out", 2) == [None, None]
    return d / "out"


def test_hf_ddp_checkpoints_sealed_from_memory(hf_ddp_run):
    """Each process's RNG states (its rng_state_R.pth, read by the
    directory reader under its stem), gathered, sealed by the process that
    saves with the weights, optimizer and scheduler: exactly `detcheck
    hash`, and `verify --seal` passes."""
    for n in (1, 2):
        ckpt = hf_ddp_run / ("checkpoint-%d" % n)
        assert {"rng_state_0.pth", "rng_state_1.pth"} <= set(os.listdir(ckpt))
        sealed = seal_is_hash(ckpt, ckpt / SEAL)
        assert {"transformer.wte.weight", "state.0.exp_avg", "rng_state_0.cpu", "rng_state_1.cpu"} <= set(
            sealed.tensors)
        assert "cpu" not in sealed.tensors
        assert sealed.tensors["rng_state_0.cpu"] != sealed.tensors["rng_state_1.cpu"]  # each rank's own
        assert 'seal_world_size: "2"' in (ckpt / SEAL).read_text()


def test_hf_ddp_resume_verified(hf_ddp_run, tmp_path):
    out = copy_run(hf_ddp_run, tmp_path)
    assert hf_ddp(tmp_path, out, 3, resume=str(out / "checkpoint-1")) == [{"sealed": True, "not_compared": []}] * 2
    seal_is_hash(out / "checkpoint-3", out / "checkpoint-3" / SEAL)


def test_hf_ddp_corrupt_optimizer_refused_on_every_rank(hf_ddp_run, tmp_path):
    out = copy_run(hf_ddp_run, tmp_path)
    ckpt = out / "checkpoint-1"
    flip_tensor_byte(ckpt / "optimizer.pt")
    r = run_cli("verify", "--seal", ckpt)
    assert r.returncode == 1, r.stdout + r.stderr
    for res in hf_ddp(tmp_path, out, 3, resume=str(ckpt)):
        e = res["error"]
        assert e["kind"] == "differs" and e["files"] == ["optimizer.pt"] and e["tensor"] in r.stdout, res


def test_hf_ddp_rng_not_restored_named_on_every_rank(hf_ddp_run, tmp_path):
    out = copy_run(hf_ddp_run, tmp_path)
    for res in hf_ddp(tmp_path, out, 3, resume=str(out / "checkpoint-1"), no_rng_on=1):
        e = res["error"]
        assert e["kind"] == "differs" and e["files"] == ["rng_state_1.pth"], res


def test_hf_ddp_seal_failure_raised_on_every_rank(tmp_path):
    """A process that fails while the ranks gather their parts: every
    process raises (none waits in the gather for it)."""
    hf_preload()
    res = hf_ddp(tmp_path, tmp_path / "out", 1, fail_on=1)
    assert res[1] == {"raised": "OSError: no RNG here"}, res
    assert res[0]["raised"].startswith("RuntimeError: detcheck: process 1 failed to seal ") and \
        res[0]["raised"].endswith("checkpoint-1: OSError: no RNG here"), res


def test_hf_ddp_resumed_by_one_process_says_what_is_not_compared(hf_ddp_run, tmp_path):
    """One process resumes from the 2 processes' checkpoint: the weights,
    optimizer and scheduler are compared; the rng_state_R.pth that no
    process of this run restored are named, never a silent pass. The seal
    here is made from the files (`detcheck seal`: no world size in it): its
    names say which rng_state_R.pth it holds."""
    out = copy_run(hf_ddp_run, tmp_path)
    shutil.rmtree(out / "checkpoint-2")  # saved again by one process: not over the 2 processes' files
    os.unlink(out / "checkpoint-1" / SEAL)
    r = run_cli("seal", out / "checkpoint-1")
    assert r.returncode == 0 and "seal_world_size" not in (out / "checkpoint-1" / SEAL).read_text(), r.stderr
    with pytest.warns(UserWarning, match=r"rng_state_0\.pth, rng_state_1\.pth .*not compared"):
        cb = hf_train(out, 3, resume=out / "checkpoint-1")
    assert cb.seal_result.sealed and cb.seal_result.not_compared == ["rng_state_0.pth", "rng_state_1.pth"]


# ---------------------------------------------------------------- Lightning

def lightning_train(out, max_steps, ckpt_path=None, **cb_kwargs):
    """A linear model trained with Adam and a StepLR, ModelCheckpoint every
    2 steps into out; returns the callback."""
    L = pytest.importorskip("lightning")
    from lightning.pytorch.callbacks import ModelCheckpoint
    from detcheck.integrations.lightning import DetcheckCallback

    def configure(params):
        opt = torch.optim.Adam(params, lr=0.1)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1)]
    Mod = lightning_linear(configure)

    torch.manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16, 1))
    cb = DetcheckCallback(**cb_kwargs)
    mc = ModelCheckpoint(dirpath=str(out), every_n_train_steps=2, save_top_k=-1)
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[cb, mc])
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(resuming from a checkpoint|dirpath has changed|isinstance).*")
        trainer.fit(Mod(), torch.utils.data.DataLoader(ds, batch_size=4),
                    ckpt_path=ckpt_path and str(ckpt_path))
    return cb


@pytest.fixture(scope="module")
def lightning_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("pl") / "ckpts"
    lightning_train(out, 4)
    return out


def test_lightning_checkpoints_sealed_and_resume_verified(lightning_run, tmp_path):
    for step in (2, 4):
        ckpt = lightning_run / ("epoch=0-step=%d.ckpt" % step)
        sealed = seal_is_hash(ckpt, str(ckpt) + ".detcheck-seal.yaml")
        assert {"state_dict.lin.weight", "optimizer_states.0.state.0.exp_avg"} <= set(sealed.tensors)
    ckpt = lightning_run / "epoch=0-step=2.ckpt"
    cb = lightning_train(tmp_path / "resumed", 5, ckpt_path=ckpt)
    assert cb.seal_result is not None and cb.seal_result.sealed and cb.seal_result.tensors_compared == 9
    last = tmp_path / "last.ckpt"  # as ModelCheckpoint(save_last="link") links it: the target's seal
    os.symlink(ckpt, last)
    assert lightning_train(tmp_path / "resumed2", 5, ckpt_path=last).seal_result.sealed


def test_lightning_corrupt_refused(lightning_run, tmp_path):
    ckpt = tmp_path / "epoch=0-step=2.ckpt"
    shutil.copy(lightning_run / ckpt.name, ckpt)
    shutil.copy(str(lightning_run / ckpt.name) + ".detcheck-seal.yaml", str(ckpt) + ".detcheck-seal.yaml")
    flip_tensor_byte(ckpt)
    r = run_cli("verify", "--seal", ckpt)
    assert r.returncode == 1, r.stdout + r.stderr
    with pytest.raises(detcheck.SealError) as e:
        lightning_train(tmp_path / "resumed", 5, ckpt_path=ckpt)
    assert e.value.kind == "differs" and e.value.tensor in r.stdout and ckpt.name in str(e.value)


def test_lightning_unsealed_refused_unless_not_required(lightning_run, tmp_path):
    ckpt = tmp_path / "epoch=0-step=2.ckpt"
    shutil.copy(lightning_run / ckpt.name, ckpt)
    with pytest.raises(detcheck.SealError) as e:
        lightning_train(tmp_path / "resumed", 5, ckpt_path=ckpt)
    assert e.value.kind == "unsealed"
    with pytest.warns(UserWarning, match="not sealed"):
        cb = lightning_train(tmp_path / "resumed2", 5, ckpt_path=ckpt, require_seal=False)
    assert not cb.seal_result.sealed


def test_lightning_stop_checkpoint_sealed_through_session(tmp_path, monkeypatch):
    """DETCHECK_STOP_AT=K: the callback's step=K.ckpt is sealed (by
    Session.stopped) before stop.json says it is complete."""
    monkeypatch.setenv("DETCHECK_STOP_AT", "3")
    monkeypatch.setenv("DETCHECK_CHECKPOINT_DIR", str(tmp_path / "stop"))
    monkeypatch.setenv("DETCHECK_RECORD", str(tmp_path / "rec"))
    lightning_train(tmp_path / "mc", 6)
    ckpt = tmp_path / "stop" / "step=3.ckpt"
    seal = str(ckpt) + ".detcheck-seal.yaml"
    assert 'seal_step: "3"' in open(seal).read()
    seal_is_hash(ckpt, seal)
    assert os.path.getmtime(seal) <= os.path.getmtime(tmp_path / "rec" / "stop.json")
    monkeypatch.setenv("DETCHECK_RESUME", "1")
    monkeypatch.delenv("DETCHECK_STOP_AT")
    from detcheck.integrations.lightning import ckpt_path
    cb = lightning_train(tmp_path / "mc2", 5, ckpt_path=ckpt_path())
    assert cb.seal_result.sealed


# ---------------------------------------------------------------- Session

def test_session_stopped_seals_and_resumed_verifies(tmp_path, monkeypatch):
    monkeypatch.setenv("DETCHECK_RECORD", str(tmp_path / "rec"))
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()

    def state(step):
        return {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
    path = tmp_path / "step_1.pt"
    torch.save(state(1), path)
    s = detcheck.session()
    with pytest.raises(ValueError, match="without the checkpoint"):
        s.stopped(1, state=state(1))
    assert s.stopped(1, checkpoint=path, state=state(1)) == str(tmp_path / "rec" / "stop.json")
    seal_is_hash(path, str(path) + ".detcheck-seal.yaml")
    assert s.resumed(path, state(1)).sealed
    with torch.no_grad():
        model.weight[0, 0] += 1
    with pytest.raises(detcheck.SealError) as e:
        s.resumed(path, state(1))
    assert e.value.tensor == "model.weight" and e.value.kind == "differs"
    other = tmp_path / "other.pt"
    torch.save(state(1), other)
    with pytest.raises(detcheck.SealError, match="not sealed"):
        s.resumed(other, state(1))
    with pytest.warns(UserWarning, match="not sealed"):
        assert not s.resumed(other, state(1), require=False)

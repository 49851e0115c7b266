"""detcheck.ReplicaGuard with the real libraries on CPU gloo ranks (forked):
HSDP (FSDP2 ``fully_shard`` on a 2 x 2 ("replicate", "shard") mesh) compares
each local shard across its replicate group only, and names a bit flipped in
rank 3's shard within that group (two replicas: no culprit) while the other
group sees nothing; the transformers Trainer and Lightning callbacks with
``replica_guard=N`` check after each optimizer step and after a resume, and
name a rank whose weights were flipped. DeepSpeed ZeRO-1 runs in the fixture
venv (tests/cli/test_replica_deepspeed.sh)."""
import json
import os
import warnings

import pytest
import torch
import torch.distributed as dist

import detcheck
from conftest import free_port, hf_preload, hf_rank_env, lightning_linear
from test_seal import ranks


def flip_bit(t, index=0, bit=0):
    """Flips one bit of element ``index`` of the float32 tensor ``t`` in place."""
    with torch.no_grad():
        t.view(-1).view(torch.int32)[index] ^= 1 << bit


def described(m):
    """A ReplicaMismatch (or None) as JSON."""
    if m is None:
        return None
    return {"step": m.step, "ranks": list(m.ranks), "tensor": m.tensor, "kind": m.kind,
            "replicas": list(m.replicas), "message": str(m)}


def checked(call):
    """What a call found: the ReplicaMismatch it raised or returned."""
    try:
        r = call()
    except detcheck.ReplicaMismatch as m:
        return described(m)
    return described(r) if isinstance(r, detcheck.ReplicaMismatch) else None


# ---------------------------------------------------------------- HSDP

def hsdp_rank(rank, world, init, out, steps, flip_at):
    """A 2-layer MLP under FSDP2 on a ("replicate", "shard") mesh, each rank
    its own batches, AdamW; the guard after every step. At step flip_at
    (after optimizer.step()) rank 3 flips a bit of its local shard of
    0.weight. Writes what each check found."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init, rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    guard = detcheck.ReplicaGuard(model, opt)
    g = torch.Generator().manual_seed(100 + rank)
    found = {}
    for step in range(1, steps + 1):
        model(torch.randn(4, 8, generator=g)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if step == flip_at and rank == 3:
            flip_bit(model[0].weight.to_local(), index=3, bit=20)
        found[step] = checked(lambda: guard.step(step))
    json.dump({"found": found, "local": {n: list(p.to_local().shape) for n, p in model.named_parameters()}},
              open(out, "w"))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def hsdp_runs(tmp_path_factory):
    import torch.distributed.fsdp  # noqa: F401  (once, not by each forked rank)
    import torch.distributed.tensor  # noqa: F401
    d = tmp_path_factory.mktemp("hsdp")
    return {"clean": ranks(d, 4, hsdp_rank, steps=4, flip_at=None),
            # the last step: every rank raises the verdict there
            "flip": ranks(d, 4, hsdp_rank, steps=3, flip_at=3)}


def test_hsdp_correct_run_has_no_mismatch(hsdp_runs):
    for r, res in enumerate(hsdp_runs["clean"]):
        # the shards differ across the shard dimension: never compared
        assert res["local"]["0.weight"] == [8, 8], res["local"]
        assert res["found"] == {str(s): None for s in range(1, 5)}, (r, res["found"])


def test_hsdp_flip_named_in_its_replicate_group_only(hsdp_runs):
    """Compared within the replicate group of ranks 1 and 3 (two replicas: no
    culprit); every rank of the world learns the verdict and raises it, so
    that no rank trains on into a collective the others left."""
    res = hsdp_runs["flip"]
    for r in range(4):
        found = res[r]["found"]
        assert found["1"] is None and found["2"] is None, (r, found)
        m = found["3"]
        assert m is not None, (r, found)
        assert m["step"] == 3 and m["ranks"] == [] and m["tensor"] == "0.weight", (r, m)
        assert m["kind"] == "parameter" and sorted(m["replicas"]) == [1, 3], (r, m)


# ---------------------------------------------------------------- Trainer and Lightning

def hf_rank(rank, world, init, out, port, max_steps, flip_at, every, save=False, resume=None):
    """A tiny GPT-2 trained by the transformers Trainer as one of world
    DDP ranks (accelerate, gloo), DetcheckCallback(replica_guard=every);
    rank 2 flips a bit of a weight right after optimizer.step() of step
    flip_at (0: at on_train_begin, as a bad load would), before the guard.
    save: checkpoint-N every step into init's folder (resume: from one)."""
    hf_rank_env(rank, world, port)
    import transformers
    from detcheck.integrations.hf import DetcheckCallback
    transformers.set_seed(0)
    cfg = transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    model = transformers.GPT2LMHeadModel(cfg)
    g = torch.Generator().manual_seed(1)
    data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 64, (24, 16), generator=g)]
    args = transformers.TrainingArguments(output_dir=os.path.dirname(init) + "/hf", max_steps=max_steps,
                                          per_device_train_batch_size=2, use_cpu=True, report_to=[],
                                          save_strategy="steps" if save else "no", save_steps=1,
                                          logging_strategy="no", seed=0, data_seed=0, dataloader_num_workers=0,
                                          disable_tqdm=True, ddp_backend="gloo")
    target = "transformer.h.0.mlp.c_fc.weight"

    class Flip(transformers.TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kw):
            if flip_at == 0 and rank == 2:
                flip_bit(dict(model.named_parameters())[target], index=5, bit=3)

        def on_optimizer_step(self, args, state, control, model=None, **kw):
            if state.global_step + 1 == flip_at and rank == 2:
                flip_bit(dict(model.named_parameters())[target], index=5, bit=3)

    cb = DetcheckCallback(seal=False, replica_guard=every)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data, callbacks=[Flip(), cb])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = checked(lambda: trainer.train(resume_from_checkpoint=resume))
    json.dump({"found": found, "steps": trainer.state.global_step, "every": cb.replica_guard.every},
              open(out, "w"))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def hf_runs(tmp_path_factory):
    hf_preload()
    d = tmp_path_factory.mktemp("hfrep")
    return {"clean": ranks(d, 3, hf_rank, port=free_port(), max_steps=3, flip_at=None, every=1, save=True),
            "every2": ranks(d, 3, hf_rank, port=free_port(), max_steps=3, flip_at=1, every=2),
            "resume": ranks(d, 3, hf_rank, port=free_port(), max_steps=4, flip_at=0, every=1,
                            resume=str(d / "hf" / "checkpoint-3"))}


def test_hf_trainer_replica_guard(hf_runs):
    for r, res in enumerate(hf_runs["clean"]):
        assert res == {"found": None, "steps": 3, "every": 1}, (r, res)
    # the flip on rank 2 after step 1's optimizer.step(), every=2: named at step 2 (the next
    # checked one) on every rank, by majority
    for r, res in enumerate(hf_runs["every2"]):
        m = res["found"]
        assert m is not None and res["every"] == 2, (r, res)
        assert m["step"] == 2 and m["ranks"] == [2], (r, m)
        assert m["tensor"] == "transformer.h.0.mlp.c_fc.weight" and m["kind"] == "parameter", (r, m)
        assert res["steps"] == 1, (r, res)  # raised before step 2's end: no checkpoint-2
    # resumed from checkpoint-3, rank 2's weights differ before the first step: caught at the resume
    for r, res in enumerate(hf_runs["resume"]):
        m = res["found"]
        assert m is not None and m["step"] == 3 and m["ranks"] == [2], (r, res)
        assert res["steps"] == 3, (r, res)  # no step was taken


def lightning_rank(rank, world, init, out, port, max_steps, flip_at, ckpt=None, resume=None):
    """A Linear trained by Lightning's DDP strategy on world CPU processes
    launched here (LOCAL_RANK set: Lightning joins them), with
    DetcheckCallback(replica_guard=1); rank 2 flips a bit of the weight
    after step flip_at's optimizer step (0: at on_train_start, as a bad
    load would). ckpt: save the trainer's checkpoint there at the end."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NODE_RANK="0", LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world), RANK=str(rank))
    torch.set_num_threads(1)
    import lightning as L
    from detcheck.integrations.lightning import DetcheckCallback

    Mod = lightning_linear(lambda params: torch.optim.AdamW(params, lr=0.1))

    class Flip(L.Callback):
        def on_train_start(self, trainer, pl_module):
            if flip_at == 0 and rank == 2:
                flip_bit(pl_module.lin.weight, index=1, bit=7)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, i):
            if trainer.global_step == flip_at and rank == 2:
                flip_bit(pl_module.lin.weight, index=1, bit=7)

    torch.manual_seed(0)
    ds = torch.utils.data.TensorDataset(torch.randn(48, 4), torch.randn(48, 1))
    cb = DetcheckCallback(seal=False, replica_guard=1)
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", devices=world, strategy="ddp", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[Flip(), cb])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = checked(lambda: trainer.fit(Mod(), torch.utils.data.DataLoader(ds, batch_size=4), ckpt_path=resume))
    if ckpt is not None and found is None:
        trainer.save_checkpoint(ckpt)
    json.dump({"found": found, "steps": trainer.global_step}, open(out, "w"))
    if dist.is_initialized():
        dist.destroy_process_group()


def test_lightning_replica_guard(tmp_path):
    pytest.importorskip("lightning")
    import detcheck.integrations.lightning  # noqa: F401  (once, not by each forked rank)
    ckpt = str(tmp_path / "last.ckpt")
    for r, res in enumerate(ranks(tmp_path, 3, lightning_rank, port=free_port(), max_steps=3, flip_at=None,
                                  ckpt=ckpt)):
        assert res == {"found": None, "steps": 3}, (r, res)
    for r, res in enumerate(ranks(tmp_path, 3, lightning_rank, port=free_port(), max_steps=4, flip_at=2)):
        m = res["found"]
        assert m is not None and m["step"] == 2 and m["ranks"] == [2], (r, res)
        assert m["tensor"] == "lin.weight" and m["kind"] == "parameter", (r, m)
    # resumed from step 3, rank 2's weight differs before the first step
    for r, res in enumerate(ranks(tmp_path, 3, lightning_rank, port=free_port(), max_steps=5, flip_at=0,
                                  resume=ckpt)):
        m = res["found"]
        assert m is not None and m["step"] == 3 and m["ranks"] == [2], (r, res)
        assert res["steps"] == 3, (r, res)


def test_replica_guard_argument_is_checked():
    from detcheck.integrations._replica import guard_every
    assert [guard_every(n) for n in (None, False, True, 1, 10)] == [None, None, 1, 1, 10]
    for bad in (0, -1, 2.5, "10"):
        with pytest.raises(ValueError, match="replica_guard"):
            guard_every(bad)

"""Shared helpers: the detcheck CLI under test ($DETCHECK, else the bundled
one) and its JSON output."""
import itertools
import json
import os
import subprocess

import pytest


def cli_path():
    from detcheck.__main__ import cli_path as p
    return p()


def run_cli(*args, check=True):
    r = subprocess.run([cli_path()] + [str(a) for a in args], capture_output=True, text=True)
    if check and r.returncode not in (0, 1):
        raise AssertionError("detcheck %s: exit %d\n%s%s" % (" ".join(map(str, args)), r.returncode,
                                                             r.stdout, r.stderr))
    return r


def cli_hash(path):
    """`detcheck hash --json PATH` as a dict."""
    return json.loads(run_cli("hash", "--json", path).stdout)


@pytest.fixture
def cli():
    return run_cli


def cli_tensors(doc):
    return {t["name"]: (t["group"], t["dtype"], tuple(t["shape"]), t["digest"]) for t in doc["tensors"]}


def cli_values(doc):
    return {v["name"]: v["value"] for v in doc.get("values", [])}


_fork_runs = itertools.count()


def _rank_main(target, args, kw):
    import torch
    # one OpenMP thread in a forked rank: libgomp's team of the parent (any
    # earlier test's matmul) does not exist in the child, and waiting for it
    # hangs the rank's first parallel region
    torch.set_num_threads(1)
    target(*args, **kw)


def fork_ranks(tmp_path, world, target, **kw):
    """Runs target(rank, world, init, out, **kw) on world forked gloo ranks
    (forked from this process: torch is imported once, not once per rank);
    returns their output paths. A rank that fails or hangs (240 s) fails the
    test, naming it."""
    import functools
    import multiprocessing
    import torch
    if not torch.distributed.is_available():
        pytest.skip("torch.distributed is not available")
    n = next(_fork_runs)
    init = str(tmp_path / ("init%d" % n))
    outs = [str(tmp_path / ("out%d_%d.json" % (n, r))) for r in range(world)]
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=functools.partial(_rank_main, target, (r, world, init, outs[r]), kw))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()
        assert p.exitcode == 0, "rank %d exited %s (its traceback is above)" % (r, p.exitcode)
    return outs


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hf_preload():
    """Imports, once in the parent of forked ranks, what their transformers
    Trainer needs (transformers loads its modules lazily: not once per
    rank); skips without transformers. Returns the transformers module."""
    transformers = pytest.importorskip("transformers")
    import accelerate.state  # noqa: F401
    import detcheck.integrations.hf  # noqa: F401
    transformers.Trainer, transformers.TrainingArguments, transformers.GPT2LMHeadModel  # noqa: B018
    return transformers


def hf_rank_env(rank, world, port):
    """Makes this forked process rank ``rank`` of ``world`` DDP processes
    for a transformers Trainer (accelerate joins them through the
    environment; TrainingArguments(ddp_backend="gloo") on the CPU)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world))
    from accelerate.state import AcceleratorState, PartialState
    # forked from pytest: a Trainer of an earlier test left accelerate's one-process state
    AcceleratorState._reset_state(True)
    PartialState._reset_state()


def lightning_linear(configure):
    """A LightningModule class: one Linear(4, 1) trained on the MSE of
    (x, y) batches; configure(parameters) is its configure_optimizers."""
    import lightning as L
    import torch

    class Linear(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, i):
            x, y = batch
            return torch.nn.functional.mse_loss(self.lin(x), y)

        def configure_optimizers(self):
            return configure(self.parameters())
    return Linear

"""A plain PyTorch training loop whose resume reproduces the uninterrupted
run bit for bit, ready for `detcheck resume-check`:

    detcheck resume-check -- python examples/python/resume_train.py --steps 12
    detcheck resume-check --kill --at 3,7 -- python examples/python/resume_train.py

The contract (detcheck.session(), read from the environment resume-check
sets) in the loop below: stop after step DETCHECK_STOP_AT once its
checkpoint is saved (session.should_stop, session.stopped); with
DETCHECK_RESUME=1 load the checkpoint from DETCHECK_CHECKPOINT_DIR and go
on from there; record with detcheck.autorecord, told the steps already done.

What the checkpoint must hold for the resume to be exact: the weights, the
optimizer state (AdamW's moments), the LR scheduler, the global RNG states
(torch, CUDA, NumPy, Python `random`: dropout and the augmentation draw
from them) and the data position (the step: each epoch's order comes from
its own seeded generator, and a resumed epoch skips the batches it already
trained on). Forget one and resume-check names it.

Without the DETCHECK_* variables the script trains --steps steps and
records nothing.
"""
import argparse
import itertools
import os
import random

import numpy as np
import torch
import torch.nn.functional as F

import detcheck


class Jitter(torch.nn.Module):
    """An augmentation inside the model: Python's RNG is training state too."""

    def forward(self, x):
        return x * random.uniform(0.9, 1.1) if self.training else x


def save(path, step, model, opt, sched):
    """The checkpoint after `step`, written atomically (a temporary name,
    fsync, rename): a kill mid-save leaves the previous one whole."""
    state = {"step": step, "model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
             "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
                     "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None}}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def load(path, model, opt, sched):
    """Restores everything save() wrote; returns the checkpoint's step."""
    state = torch.load(path, weights_only=False)  # NumPy's RNG state is not a tensor
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    sched.load_state_dict(state["sched"])
    rng = state["rng"]
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    if rng["cuda"] is not None:
        torch.cuda.set_rng_state_all(rng["cuda"])
    return state["step"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(48, 8), torch.randn(48, 1))
    order = torch.Generator()  # the loader's own: iterating it leaves the global RNG alone
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, generator=order)
    model = torch.nn.Sequential(Jitter(), torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)

    s = detcheck.session()
    ckpt = os.path.join(s.checkpoint_dir("checkpoints"), "last.pt")
    done = load(ckpt, model, opt, sched) if s.resume else 0  # the steps the checkpoint holds
    rec = detcheck.autorecord(model, opt, last_step=done)    # records when DETCHECK_RECORD is set
    for step in range(done + 1, args.steps + 1):
        epoch, i = divmod(step - 1, len(loader))
        if i == 0 or step == done + 1:  # an epoch's order from its own seed; a resumed one skips what was done
            order.manual_seed(1000 + epoch)
            batches = itertools.islice(iter(loader), i, None)
        x, y = next(batches)
        loss = F.mse_loss(model(x), y)
        if rec:
            rec.loss(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if s.should_stop(step):  # DETCHECK_STOP_AT: checkpoint, say so, stop
            save(ckpt, step, model, opt, sched)
            s.stopped(step, ckpt)
            return
    print("trained %d steps, last loss %.6f" % (args.steps, loss.item()) if args.steps > done else "nothing to do")


if __name__ == "__main__":
    main()

"""The plain loop of examples/python/resume_train.py with one planted resume
mistake, for the negative controls of `detcheck resume-check`
(plain_*.py call main() with theirs):

- forget_rng: torch's CPU RNG state is not restored (dropout draws from it):
  resume-check names rng.torch at the first resumed step.
- loader_restart: the resumed epoch's loader starts again at its first
  batch: the batch of step K+1 is that of the epoch's first step (step 1
  with the default 8 steps, 6 batches an epoch, K = 4).
- sched_twice: the LR scheduler is stepped once more after loading: lr.0
  (and the trajectory's lr) differ from step K+1.
- no_optim_state: AdamW's state is neither saved nor loaded (with a
  constant lr, so that only the optimizer state is wrong): the optimizer
  state entries differ at K+1 while the gradients are equal.

- flaky_update: no resume mistake; the stop run's optimizer update of step 2
  moves one weight element by one ULP more (as the allocation-dependent
  results of PyTorch's CPU optimizer kernels do in some runs only):
  gradients and moments equal, the weights differ, before any stop.

main(stop="exit") saves the checkpoint at K and just returns (exit 0)
without calling session().stopped(): a clean stop needs no stop.json.

Each takes --steps N (default 8) and runs in about a second on a CPU.
"""
import argparse
import itertools
import os
import random

import numpy as np
import torch
import torch.nn.functional as F

import detcheck

MISTAKES = ("none", "forget_rng", "loader_restart", "sched_twice", "no_optim_state", "flaky_update")


class Jitter(torch.nn.Module):
    def forward(self, x):
        return x * random.uniform(0.9, 1.1) if self.training else x


def main(mistake="none", stop="stopped"):
    assert mistake in MISTAKES and stop in ("stopped", "exit"), (mistake, stop)
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(48, 8), torch.randn(48, 1))
    order = torch.Generator()
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, generator=order)
    model = torch.nn.Sequential(Jitter(), torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                torch.nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = None if mistake == "no_optim_state" else torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)

    s = detcheck.session()
    ckpt = os.path.join(s.checkpoint_dir("checkpoints"), "last.pt")
    done = 0
    if s.resume:
        state = torch.load(ckpt, weights_only=False)
        model.load_state_dict(state["model"])
        if mistake != "no_optim_state":
            opt.load_state_dict(state["opt"])
        if sched is not None:
            sched.load_state_dict(state["sched"])
            if mistake == "sched_twice":
                sched.step()  # "to be on the next step": once too often
        if mistake != "forget_rng":
            torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        done = state["step"]
    if mistake == "flaky_update" and s.stop_at is not None and not s.resume:
        steps_taken = [done]

        def flaky(optimizer, a, kw):  # runs inside optimizer.step(), before the recorder's hook
            steps_taken[0] += 1
            if steps_taken[0] == 2:
                with torch.no_grad():
                    w = model[4].weight.view(-1)
                    w[0] = torch.nextafter(w[0], w[0] + 1)

        opt.register_step_post_hook(flaky)
    rec = detcheck.autorecord(model, opt, last_step=done)
    for step in range(done + 1, args.steps + 1):
        epoch, i = divmod(step - 1, len(loader))
        if i == 0 or step == done + 1:
            order.manual_seed(1000 + epoch)
            skip = 0 if mistake == "loader_restart" else i  # the restart: a fresh iterator, nothing skipped
            batches = itertools.islice(iter(loader), skip, None)
        x, y = next(batches)
        loss = F.mse_loss(model(x), y)
        if rec:
            rec.loss(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        if s.should_stop(step):
            state = {"step": step, "model": model.state_dict(),
                     "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                             "python": random.getstate()}}
            if mistake != "no_optim_state":
                state["opt"] = opt.state_dict()
            if sched is not None:
                state["sched"] = sched.state_dict()
            os.makedirs(os.path.dirname(ckpt), exist_ok=True)
            with open(ckpt + ".tmp", "wb") as f:
                torch.save(state, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(ckpt + ".tmp", ckpt)
            if stop == "stopped":
                s.stopped(step, ckpt)
            return

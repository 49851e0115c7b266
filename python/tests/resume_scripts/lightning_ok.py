"""A correct Lightning run for detcheck resume-check: a tiny MLP with dropout,
CPU, --steps optimizer steps (default 8) over 48 samples in batches of 8
(6 steps an epoch, so a stop at 4 resumes mid-epoch).

Lightning 2.x restores the weights, the optimizer, the LR scheduler and its
loops from a checkpoint, but not the global RNG states, and for a plain
DataLoader not the position inside the epoch (it restarts the epoch's data
at its first batch). What it takes, then, besides the DetcheckCallback and
``ckpt_path=ckpt_path()``:

- the RNG states saved and restored by the LightningModule
  (on_save_checkpoint / on_load_checkpoint);
- a stateful loader: a DataLoader with state_dict / load_state_dict
  (Lightning stores it in the checkpoint and loads it before iterating),
  whose sampler draws each epoch's order from the epoch's own seed and, on
  resume, skips the batches the checkpoint already trained on;
- a generator of the DataLoader's own, so that starting an iterator leaves
  the global RNG alone.
"""
import argparse
import os
import random
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

try:
    import lightning.pytorch as pl
except ImportError:
    import pytorch_lightning as pl

import detcheck
from detcheck.integrations.lightning import DetcheckCallback, ckpt_path


class EpochSampler(torch.utils.data.Sampler):
    """Each epoch's order from its own seed (Lightning calls set_epoch);
    ``skip`` samples left out once, on resume."""

    def __init__(self, n, seed=1000):
        self.n, self.seed, self.epoch, self.skip = n, seed, 0, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return self.n

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist()
        skip, self.skip = self.skip, 0
        return iter(order[skip:])


class ResumableLoader(torch.utils.data.DataLoader):
    """Stateful for Lightning: its position is the batches of the epoch
    trained on (``consumed``, set by the module at each batch's start)."""
    consumed = 0

    def state_dict(self):
        return {"epoch": self.sampler.epoch, "consumed": self.consumed}

    def load_state_dict(self, state):
        self.sampler.epoch = state["epoch"]
        self.sampler.skip = state["consumed"] * self.batch_size


class Net(pl.LightningModule):
    def __init__(self, loader):
        super().__init__()
        self.loader = loader
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2),
                                       torch.nn.Linear(32, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self(x), y)

    def on_train_batch_start(self, batch, batch_idx):
        self.loader.consumed = batch_idx + 1  # once this step is done (a checkpoint after it skips it)

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint):
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        # plain lists and numbers: Lightning loads checkpoints with weights_only=True
        checkpoint["rng"] = {"torch": torch.get_rng_state(), "numpy": [kind, keys.tolist(), pos, has_gauss, gauss],
                             "python": random.getstate()}

    def on_load_checkpoint(self, checkpoint):
        rng = checkpoint["rng"]
        torch.set_rng_state(rng["torch"])
        np.random.set_state(tuple(rng["numpy"]))
        random.setstate(rng["python"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(48, 8), torch.randn(48, 1))
    loader = ResumableLoader(data, batch_size=8, sampler=EpochSampler(len(data)), generator=torch.Generator())
    model = Net(loader)
    root = detcheck.session().checkpoint_dir(os.path.join(tempfile.gettempdir(), "detcheck_lightning_ok"))
    trainer = pl.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=root, callbacks=[DetcheckCallback()])
    trainer.fit(model, loader, ckpt_path=ckpt_path())


if __name__ == "__main__":
    main()

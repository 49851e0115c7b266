"""A correct Hugging Face Trainer run for detcheck resume-check: a tiny GPT-2
built from a config (no download), CPU, --steps optimizer steps (default 8)
over a 24-sample dataset in batches of 4 (6 steps an epoch, so a stop at 4
resumes mid-epoch: the Trainer skips the epoch's first batches and restores
the RNG states it saved). The contract takes two lines: the callback, and
``resume_from_checkpoint=resume_arg()``. --workers N (dataloader_num_workers)
and --accum N (gradient_accumulation_steps) make it the shape users run
under ``detcheck repro --trace ops`` (loader workers, accumulation)."""
import argparse
import os
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import detcheck
from detcheck.integrations.hf import DetcheckCallback, resume_arg


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n=24, length=16, vocab=64):
        g = torch.Generator().manual_seed(7)
        self.ids = torch.randint(0, vocab, (n, length), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--workers", type=int, default=0, help="dataloader_num_workers")
    ap.add_argument("--accum", type=int, default=1, help="gradient_accumulation_steps")
    args = ap.parse_args()
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)  # dropout 0.1: RNG matters
    model = GPT2LMHeadModel(config)
    out = detcheck.session().checkpoint_dir(os.path.join(tempfile.gettempdir(), "detcheck_hf_ok"))
    targs = TrainingArguments(output_dir=out, max_steps=args.steps, per_device_train_batch_size=4,
                              learning_rate=1e-3, lr_scheduler_type="linear", warmup_steps=2, logging_steps=1,
                              save_strategy="no", report_to=[], use_cpu=True, seed=0, disable_tqdm=True,
                              dataloader_num_workers=args.workers, gradient_accumulation_steps=args.accum)
    trainer = Trainer(model=model, args=targs, train_dataset=Tokens(), callbacks=[DetcheckCallback()])
    trainer.train(resume_from_checkpoint=resume_arg())


if __name__ == "__main__":
    main()

"""A script that does not honour resume-check's contract: it records every
step (detcheck.autorecord) but ignores DETCHECK_STOP_AT and
DETCHECK_RESUME, so its stop run records all --steps steps and leaves no
stop.json (resume-check: exit 2, "DETCHECK_STOP_AT not honoured")."""
import argparse

import torch
import torch.nn.functional as F

import detcheck

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = detcheck.autorecord(model, opt)
    g = torch.Generator().manual_seed(1)
    for step in range(1, args.steps + 1):
        x, y = torch.randn(8, 8, generator=g), torch.randn(8, 1, generator=g)
        loss = F.mse_loss(model(x), y)
        if rec:
            rec.loss(loss)
        opt.zero_grad()
        loss.backward()
        opt.step()

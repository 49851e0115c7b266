"""Bisecting two PyTorch runs that part because one of them sums in a
different order.

Both runs train the same model on the same data, accumulating gradients over
four micro-batches; from step 4 on, run B visits the micro-batches in
reverse order -- mathematically the same sum of gradients, not the same
float bits. Each run is recorded with detcheck.Recorder and
`detcheck bisect` names the first step and the first tensor that differ,
without a checkpoint:

    python examples/python/bisect_reduction_order.py [OUT_DIR]
"""
import os
import subprocess
import sys
import tempfile

import torch

import detcheck
from detcheck.__main__ import cli_path


def run(out, reorder_from=None, steps=8):
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    g = torch.Generator().manual_seed(7)
    with detcheck.Recorder(out) as rec:
        for step in range(1, steps + 1):
            x, y = torch.randn(512, 64, generator=g), torch.randn(512, 1, generator=g)
            order = range(4)
            if reorder_from is not None and step >= reorder_from:
                order = reversed(order)  # the same sum, another order
            opt.zero_grad()
            loss = 0.0
            for m in order:
                mb = slice(128 * m, 128 * (m + 1))
                part = (model(x[mb]) - y[mb]).square().mean() / 4
                part.backward()  # .grad += this micro-batch's gradient
                loss += part.item()
            opt.step()
            rec.step(step, loss=loss, model=model, optimizer=opt)
    return out


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="detcheck-bisect-")
    a = run(os.path.join(out, "run_a"))
    b = run(os.path.join(out, "run_b"), reorder_from=4)
    print("recorded %s and %s" % (a, b))
    return subprocess.call([cli_path(), "bisect", a, b])


if __name__ == "__main__":
    sys.exit(0 if main() in (0, 1) else 2)

"""A plain PyTorch training loop made ready for `detcheck repro` with three
lines (marked "detcheck"), and an optional planted nondeterministic op to
see what an unreproducible run looks like.

The model is a small MLP with a "center" layer (x minus its row means, as a
norm layer does). Its reduction is a custom op, the way a fused kernel is
one op to PyTorch: `repro_demo::center` sums each row chunk by chunk, in the
order DEMO_ORDER says (`forward`, the default, or `reverse`). Same numbers,
another order: other float32 bits. `--plant forward` uses it in the layer's
forward, `--plant backward` in its backward; `--plant none` (the default)
uses neither and is reproducible whatever DEMO_ORDER says.

    detcheck repro -n 2 -- python examples/python/repro_train.py
    detcheck repro --env DEMO_ORDER=forward,reverse --trace ops -- \\
        python examples/python/repro_train.py --plant forward
    detcheck repro --env DEMO_ORDER=forward,reverse -- \\
        python examples/python/repro_train.py --plant backward

Without DETCHECK_RECORD in the environment (outside `detcheck repro`) the
script trains and records nothing.
"""
import argparse
import os

import torch

import detcheck  # detcheck


@torch.library.custom_op("repro_demo::center", mutates_args=())
def center(x: torch.Tensor) -> torch.Tensor:
    """x minus its row means; the mean summed 3 columns at a time, in the
    order DEMO_ORDER says."""
    chunks = list(x.split(3, dim=-1))
    if os.environ.get("DEMO_ORDER", "forward") == "reverse":
        chunks.reverse()
    acc = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
    for c in chunks:
        acc = acc + c.sum(-1, keepdim=True)
    return x - acc / x.shape[-1]


@center.register_fake
def _(x):
    return torch.empty_like(x)


def exact_center(x):
    return x - x.mean(-1, keepdim=True)


class CenterFn(torch.autograd.Function):
    """Centering, with the planted op in forward or in backward (the
    gradient of centering is the centered gradient)."""

    @staticmethod
    def forward(ctx, x, plant):
        ctx.plant = plant
        return center(x) if plant == "forward" else exact_center(x)

    @staticmethod
    def backward(ctx, g):
        return (center(g) if ctx.plant == "backward" else exact_center(g)), None


class Center(torch.nn.Module):
    def __init__(self, plant):
        super().__init__()
        self.plant = plant

    def forward(self, x):
        return CenterFn.apply(x, self.plant)


class Net(torch.nn.Module):
    def __init__(self, plant):
        super().__init__()
        self.inp = torch.nn.Linear(16, 48)
        self.act = torch.nn.Tanh()
        self.center = Center(plant)
        self.out = torch.nn.Linear(48, 4)

    def forward(self, x):
        return self.out(self.center(self.act(self.inp(x))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--plant", choices=("none", "forward", "backward"), default="none")
    args = ap.parse_args()

    torch.manual_seed(0)
    model = Net(args.plant)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    rec = detcheck.autorecord(model, opt)  # detcheck: records when DETCHECK_RECORD is set
    g = torch.Generator().manual_seed(1)
    for step in range(1, args.steps + 1):
        x, y = torch.randn(32, 16, generator=g), torch.randn(32, 4, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        if rec is not None:
            rec.loss(loss)  # detcheck: the loss of the step opt.step() records
        opt.step()
        print("step %d loss %.6f" % (step, loss.item()))


if __name__ == "__main__":
    main()

"""A transformers ``TrainerCallback`` that records a Trainer's run for
``detcheck bisect`` (imports transformers only when this module is imported).

    from detcheck.integrations.hf import DetcheckCallback
    trainer = Trainer(..., callbacks=[DetcheckCallback("runs/a")])

Each optimizer step is recorded right after ``optimizer.step()`` (the
Trainer's ``on_optimizer_step``, while the gradients are still there) as step
``state.global_step + 1``: gradients, parameters, optimizer state, and the
learning rate. The Trainer hands callbacks neither the loss nor the gradient
norm, so the trajectory's loss fields are 0 (the root digest holds the
tensors)."""
from transformers import TrainerCallback

from .._recorder import Recorder


class DetcheckCallback(TrainerCallback):
    """Records through :class:`detcheck.Recorder` (``out_dir``, ``every``,
    ``grads``: as Recorder.step)."""

    def __init__(self, out_dir, every=1, grads=True):
        self.recorder = Recorder(out_dir, every=every)
        self.grads = grads

    def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        opt = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps it
        self.recorder.step(state.global_step + 1, model=model, optimizer=opt, grads=self.grads)
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.recorder.close()
        return control

"""A transformers ``TrainerCallback`` that records a Trainer's run for
``detcheck bisect`` (imports transformers only when this module is imported).

    from detcheck.integrations.hf import DetcheckCallback
    args = TrainingArguments(..., logging_steps=1)   # every step's loss
    trainer = Trainer(..., args=args, callbacks=[DetcheckCallback("runs/a")])

Each optimizer step is recorded as step ``state.global_step + 1``. Its
digests (gradients, parameters, optimizer state) and learning rate are taken
right after ``optimizer.step()`` (the Trainer's ``on_optimizer_step``, while
the gradients are still there); its trajectory line is written once its loss
is known. The Trainer hands callbacks the loss and the gradient norm only
through ``on_log``, on the steps where it logs:

- with ``logging_steps=1`` every step is logged: the line holds the step's
  loss and (pre-clipping) gradient norm, as the Trainer logged them;
- with ``logging_steps=N`` a logged step holds the Trainer's logged loss,
  the mean of the losses since the previous log, and that step's gradient
  norm; the other steps' lines have ``"loss": null`` and
  ``"grad_norm": null`` (bits ``00000000``), written when the next step
  begins or at the end of training;
- with ``logging_strategy="no"`` every line has them absent (the root
  digest still holds every tensor).

``detcheck bisect`` compares the bits, so two runs recorded with the same
logging settings compare step by step either way."""
from transformers import TrainerCallback

from .._recorder import Recorder


class DetcheckCallback(TrainerCallback):
    """Records through :class:`detcheck.Recorder` (``out_dir``, ``every``,
    ``grads``: as Recorder.step)."""

    def __init__(self, out_dir, every=1, grads=True):
        self.recorder = Recorder(out_dir, every=every)
        self.grads = grads

    def _flush(self, loss=None, grad_norm=None):
        if self.recorder.pending is not None:
            self.recorder.finish(self.recorder.pending, loss=loss, grad_norm=grad_norm)

    def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        self._flush()  # the previous step was not logged: its loss is absent
        opt = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps it
        self.recorder.take(state.global_step + 1, model=model, optimizer=opt, grads=self.grads)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        # the training log of the step just taken (global_step was bumped
        # after on_optimizer_step); evaluation and summary logs have no "loss"
        p = self.recorder.pending
        if p is not None and logs and "loss" in logs and p[0] == state.global_step:
            self._flush(loss=logs["loss"], grad_norm=logs.get("grad_norm"))
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self._flush()
        self.recorder.close()
        return control

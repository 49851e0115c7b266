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
from .._env import record_dir


class DetcheckCallback(TrainerCallback):
    """Records through :class:`detcheck.Recorder` (``out_dir``, ``every``,
    ``grads``: as Recorder.step; ``trace``, ``trace_steps``, ``dump_step``...:
    as Recorder).

    When ``DETCHECK_RECORD`` is set (``detcheck repro``), the run is recorded
    there instead, as :meth:`Recorder.from_env` sets it up (module traces by
    default); when neither it nor ``out_dir`` is given the callback does
    nothing. A traced recording is made at ``on_train_begin``, when the
    Trainer hands over the model; an untraced one (``out_dir`` without
    ``trace``) when the callback is made."""

    def __init__(self, out_dir=None, every=1, grads=True, trace=None, **recorder_kwargs):
        self.recorder = None
        self.grads = grads
        self._make = None
        if record_dir() is not None:
            self._make = lambda model, opt: Recorder.from_env(model=model, every=every, **recorder_kwargs)
        elif out_dir is not None:
            if trace in (None, "none"):
                self.recorder = Recorder(out_dir, every=every, **recorder_kwargs)
            else:
                self._make = lambda model, opt: Recorder(out_dir, every=every, model=model, trace=trace,
                                                         **recorder_kwargs)

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if self.recorder is None and self._make is not None:
            self.recorder = self._make(model, None)
        return control

    def _flush(self, loss=None, grad_norm=None):
        if self.recorder is not None and self.recorder.pending is not None:
            self.recorder.finish(self.recorder.pending, loss=loss, grad_norm=grad_norm)

    def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.recorder is None:
            return control
        self._flush()  # the previous step was not logged: its loss is absent
        opt = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps it
        self.recorder.take(state.global_step + 1, model=model, optimizer=opt, grads=self.grads)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        # the training log of the step just taken (global_step was bumped
        # after on_optimizer_step); evaluation and summary logs have no "loss"
        p = self.recorder.pending if self.recorder is not None else None
        if p is not None and logs and "loss" in logs and p[0] == state.global_step:
            self._flush(loss=logs["loss"], grad_norm=logs.get("grad_norm"))
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.recorder is not None:
            self._flush()
            self.recorder.close()
        return control

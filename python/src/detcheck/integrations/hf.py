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
logging settings compare step by step either way.

The callback also honours ``detcheck resume-check``'s contract
(:func:`detcheck.session`): with ``DETCHECK_STOP_AT=K`` it asks the
Trainer to save and stop at ``global_step == K`` (``control.should_save``,
``control.should_training_stop``) and, once that checkpoint is saved
(``on_save``), calls ``session().stopped(K, output_dir/checkpoint-K)``.
Scripts resume with :func:`resume_arg`::

    args = TrainingArguments(output_dir=detcheck.session().checkpoint_dir("out"), ...)
    trainer.train(resume_from_checkpoint=resume_arg())

Each recorded step's state entries: the batch is the model's forward inputs
of the step (every micro-batch of an accumulated step), the RNG states are
taken at its first forward, the lr of every param group when the optimizer
has stepped, and the GradScaler's state when accelerate made one (mixed
precision fp16)."""
import os

from transformers import TrainerCallback

from .._recorder import Recorder
from .._settings import record_dir
from .._session import session, ENV_CHECKPOINT_DIR, ENV_RESUME

CHECKPOINT_PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR


def resume_arg(output_dir=None):
    """The value for ``trainer.train(resume_from_checkpoint=...)``: with
    ``DETCHECK_RESUME=1`` the last ``checkpoint-N`` under
    ``DETCHECK_CHECKPOINT_DIR`` (else under ``output_dir``), found as
    transformers finds it (``get_last_checkpoint``); without it None (train
    from the start). A resume with no checkpoint there raises ValueError
    naming the directory (a run that silently started over would not be a
    resume)."""
    s = session()
    if not s.resume:
        return None
    d = s.checkpoint_dir(output_dir)
    if d is None:
        raise ValueError("detcheck: %s=1 but %s is not set (and no output_dir given)"
                         % (ENV_RESUME, ENV_CHECKPOINT_DIR))
    if not os.path.isdir(d):
        raise ValueError("detcheck: %s=1 but the checkpoint directory %s does not exist" % (ENV_RESUME, d))
    from transformers.trainer_utils import get_last_checkpoint
    last = get_last_checkpoint(d)
    if last is None:
        raise ValueError("detcheck: %s=1 but %s holds no %s-N directory" % (ENV_RESUME, d, CHECKPOINT_PREFIX))
    return last


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
        self.session = session()  # a bad DETCHECK_STOP_AT / DETCHECK_RESUME is refused now, not at step K
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
        if self.recorder is not None and not self.recorder.closed and self.recorder.pending is not None:
            self.recorder.finish(self.recorder.pending, loss=loss, grad_norm=grad_norm)

    def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.recorder is None or self.recorder.closed:
            return control
        self._flush()  # the previous step was not logged: its loss is absent
        opt = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps it
        # accelerate's AcceleratedOptimizer holds the GradScaler of fp16 mixed precision (None otherwise)
        scaler = getattr(optimizer, "scaler", None)
        self.recorder.take(state.global_step + 1, model=model, optimizer=opt, grads=self.grads, scaler=scaler)
        return control

    def _stop_step(self, state):
        k = self.session.stop_at
        return k is not None and state.global_step == k

    def on_step_end(self, args, state, control, **kwargs):
        # after DefaultFlowCallback (it runs first): its save strategy cannot undo this
        if self._stop_step(state):
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_save(self, args, state, control, **kwargs):
        if self._stop_step(state):
            self._flush()  # step K's line, even when it was not logged
            ckpt = os.path.join(args.output_dir, "%s-%d" % (CHECKPOINT_PREFIX, state.global_step))
            self.session.stopped(state.global_step, checkpoint=ckpt)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        # the training log of the step just taken (global_step was bumped
        # after on_optimizer_step); evaluation and summary logs have no "loss"
        p = self.recorder.pending if self.recorder is not None and not self.recorder.closed else None
        if p is not None and logs and "loss" in logs and p[0] == state.global_step:
            self._flush(loss=logs["loss"], grad_norm=logs.get("grad_norm"))
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self.recorder is not None and not self.recorder.closed:
            self._flush()
            self.recorder.close()
        return control

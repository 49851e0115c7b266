"""A Lightning ``Callback`` that records a run for ``detcheck bisect``
(imports lightning, else pytorch_lightning, only when imported).

    from detcheck.integrations.lightning import DetcheckCallback
    trainer = lightning.Trainer(..., callbacks=[DetcheckCallback("runs/a")])

With automatic optimization Lightning zeroes the gradients before the next
training step, so at ``on_train_batch_end`` the step's gradients, the updated
parameters and the optimizer state are all there: each batch that stepped
the optimizer is recorded as step ``trainer.global_step`` with its loss."""
try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback

from .._recorder import Recorder
from .._env import record_dir


class DetcheckCallback(Callback):
    """Records through :class:`detcheck.Recorder` (``out_dir``, ``every``,
    ``grads``: as Recorder.step; ``trace``, ``trace_steps``, ``dump_step``...:
    as Recorder).

    When ``DETCHECK_RECORD`` is set (``detcheck repro``), the run is recorded
    there instead, as :meth:`Recorder.from_env` sets it up (module traces by
    default); when neither it nor ``out_dir`` is given the callback does
    nothing. A traced recording is made at ``on_train_start`` (the
    LightningModule is traced); an untraced one (``out_dir`` without
    ``trace``) when the callback is made."""

    def __init__(self, out_dir=None, every=1, grads=True, trace=None, **recorder_kwargs):
        super().__init__()
        self.recorder = None
        self.grads = grads
        self._last = 0
        self._make = None
        if record_dir() is not None:
            self._make = lambda model: Recorder.from_env(model=model, every=every, **recorder_kwargs)
        elif out_dir is not None:
            if trace in (None, "none"):
                self.recorder = Recorder(out_dir, every=every, **recorder_kwargs)
            else:
                self._make = lambda model: Recorder(out_dir, every=every, model=model, trace=trace,
                                                    **recorder_kwargs)

    def on_train_start(self, trainer, pl_module):
        if self.recorder is None and self._make is not None:
            self.recorder = self._make(pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if self.recorder is None or step == self._last:  # accumulating: no optimizer step this batch
            return
        self._last = step
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        opts = trainer.optimizers
        self.recorder.step(step, loss=loss, model=pl_module, optimizer=opts[0] if len(opts) == 1 else None,
                           grads=self.grads)

    def on_train_end(self, trainer, pl_module):
        if self.recorder is not None:
            self.recorder.close()

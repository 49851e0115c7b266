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


class DetcheckCallback(Callback):
    """Records through :class:`detcheck.Recorder` (``out_dir``, ``every``,
    ``grads``: as Recorder.step)."""

    def __init__(self, out_dir, every=1, grads=True):
        super().__init__()
        self.recorder = Recorder(out_dir, every=every)
        self.grads = grads
        self._last = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == self._last:  # accumulating: no optimizer step this batch
            return
        self._last = step
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        opts = trainer.optimizers
        self.recorder.step(step, loss=loss, model=pl_module, optimizer=opts[0] if len(opts) == 1 else None,
                           grads=self.grads)

    def on_train_end(self, trainer, pl_module):
        self.recorder.close()

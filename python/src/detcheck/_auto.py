"""``detcheck.autorecord``: a Recorder made from the environment
(:meth:`Recorder.from_env`) that records a step at every
``optimizer.step()``, through the optimizer's step post hook."""
import atexit

from ._recorder import Recorder, _step_number


class _Auto:
    """The optimizer step post hook of :func:`autorecord`."""

    def __init__(self, rec, model, optimizer, last_step=0):
        self.rec, self.model, self.optimizer = rec, model, optimizer
        self.count = last_step
        self.handle = optimizer.register_step_post_hook(self)

    def __call__(self, optimizer, args, kwargs):
        if self.rec.closed:
            return
        import torch
        step = self.count + 1
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        gn = None
        tr = self.rec._tracer  # inside optimizer.step(): its own work is not the optimizer's
        if tr is not None:
            tr.paused += 1
        try:
            if params:
                with torch.no_grad():
                    gn = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad.detach().float())
                                                               for p in params]))
        finally:
            if tr is not None:
                tr.paused = max(0, tr.paused - 1)
        loss, self.rec._loss = self.rec._loss, None
        self.rec.step(step, loss=loss, grad_norm=gn, model=self.model, optimizer=optimizer)
        self.count = step

    def close(self):
        self.handle.remove()
        self.rec.close()


def autorecord(model, optimizer, last_step=0, **kwargs):
    last_step = _step_number(last_step)
    rec = Recorder.from_env(model=model, optimizer=optimizer, **kwargs)
    if rec is None:
        return None
    a = _Auto(rec, model, optimizer, last_step)
    rec._auto = a
    atexit.register(a.close)
    return rec

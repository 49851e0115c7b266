"""A Lightning ``Callback`` that records a run for ``detcheck bisect``
(imports lightning, else pytorch_lightning, only when imported).

    from detcheck.integrations.lightning import DetcheckCallback
    trainer = lightning.Trainer(..., callbacks=[DetcheckCallback("runs/a")])

With automatic optimization Lightning zeroes the gradients before the next
training step, so at ``on_train_batch_end`` the step's gradients, the updated
parameters and the optimizer state are all there: each batch that stepped
the optimizer is recorded as step ``trainer.global_step`` with its loss.

State entries: the step's start is ``on_train_batch_start`` of its first
batch (a LightningModule's training_step need not call its forward), the
batch is the one Lightning hands the hooks (a list of them when gradients
accumulate over several), the lr of every param group, and the GradScaler
of 16-bit mixed precision when Lightning made one.

The callback also honours ``detcheck resume-check``'s contract
(:func:`detcheck.session`): with ``DETCHECK_STOP_AT=K``, right after step
K is recorded it saves ``trainer.save_checkpoint(DIR/step=K.ckpt)`` (DIR:
``DETCHECK_CHECKPOINT_DIR``, else the callback's ``ckpt_dir``, else
``default_root_dir/checkpoints``), sets ``trainer.should_stop`` and calls
``session().stopped(K, path)``. Scripts resume with :func:`ckpt_path`::

    trainer.fit(model, loader, ckpt_path=ckpt_path())

Lightning 2.x saves neither the global RNG states nor, for a plain
DataLoader, the position inside the epoch: resumed from a mid-epoch
checkpoint it counts the steps on but restarts the epoch's data at its
first batch (warning "You're resuming from a checkpoint that ended before
the epoch ended and your dataloader is not resumable"). A reproducible
resume needs either a stop at an epoch's end, or a stateful loader (a
DataLoader with ``state_dict`` / ``load_state_dict``: Lightning saves it in
the checkpoint and loads it before iterating) and the RNG states saved and
restored by the LightningModule (``on_save_checkpoint`` /
``on_load_checkpoint``).

Sealed checkpoints (``seal=True``, the default; detcheck-seal(1)): the
callback wraps the strategy's CheckpointIO (``setup``), so each checkpoint
file it writes -- ModelCheckpoint's, ``trainer.save_checkpoint``'s -- is
sealed right after it is written, from the dict Lightning wrote it from
(``FILE.detcheck-seal.yaml``; names as ``detcheck hash FILE`` gives them,
so ``detcheck verify --seal FILE`` passes). The stop checkpoint
``step=K.ckpt`` is sealed by ``session().stopped(K, path, state=that
dict)``, before stop.json. A file that is not there once the save returned
(an asynchronous CheckpointIO, a sharded strategy's directory) is left
unsealed with a warning. With ``ckpt_path=``, at ``on_train_start`` the
state the trainer resumed with is checked against the seal
(:func:`verify_resumed`: SealError naming the entry, or the checkpoint
unsealed unless ``require_seal=False``, a warning); ``cb.seal_result`` is
the check's :class:`detcheck.SealResult`.

Replica guard (``replica_guard=N``; python/README.md, "Replica guard"): a
:class:`detcheck.ReplicaGuard` over the LightningModule and the trainer's
optimizer (made at ``on_train_start``) compares the data-parallel replicas
every N optimizer steps, at ``on_train_batch_end`` of each batch that
stepped the optimizer (``trainer.global_step`` moved: the weights and
optimizer state updated), as step ``trainer.global_step``, before this
callback records the step or saves the stop checkpoint, and before
ModelCheckpoint saves (Lightning runs checkpoint callbacks last); and once at
``on_train_start`` of a run resumed with ``ckpt_path=`` (``guard.check()``:
everything is restored by then, before the first step). With several
optimizers only the parameters and buffers are compared (a warning says
so). ``replica_guard_on_mismatch`` is the guard's ``on_mismatch`` ("raise":
:class:`detcheck.ReplicaMismatch` on every rank; "warn"; a callable);
``replica_guard_group`` its ``group``."""
import glob
import os
import re
import warnings

try:
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.plugins.io.wrapper import _WrappingCheckpointIO
except ImportError:  # the older package name
    from pytorch_lightning.callbacks import Callback
    from pytorch_lightning.plugins.io.wrapper import _WrappingCheckpointIO

from .._recorder import Recorder
from .._settings import record_dir
from .._session import session, ENV_CHECKPOINT_DIR, ENV_RESUME
from ._replica import guard_every, make_guard

_CKPT = re.compile(r"^step=(\d+)\.ckpt$")


def ckpt_name(step):
    """The file name of step K's checkpoint: ``step=K.ckpt``."""
    return "step=%d.ckpt" % step


def ckpt_path(ckpt_dir=None):
    """The value for ``trainer.fit(..., ckpt_path=...)``: with
    ``DETCHECK_RESUME=1`` the ``step=K.ckpt`` of the highest K under
    ``DETCHECK_CHECKPOINT_DIR`` (else under ``ckpt_dir``); without it None.
    A resume with no such checkpoint raises ValueError naming the directory
    (a run that silently started over would not be a resume)."""
    s = session()
    if not s.resume:
        return None
    d = s.checkpoint_dir(ckpt_dir)
    if d is None:
        raise ValueError("detcheck: %s=1 but %s is not set (and no ckpt_dir given)" % (ENV_RESUME, ENV_CHECKPOINT_DIR))
    found = []
    for p in glob.glob(os.path.join(glob.escape(d), "step=*.ckpt")):
        m = _CKPT.match(os.path.basename(p))
        if m:
            found.append((int(m.group(1)), p))
    if not found:
        raise ValueError("detcheck: %s=1 but %s holds no step=K.ckpt" % (ENV_RESUME, d))
    return max(found)[1]


def verify_resumed(trainer, path, require=True):
    """Compares the state the trainer resumed with, as Lightning dumps it
    for a save (``dump_checkpoint``: weights, optimizer and scheduler
    states, loop progress, precision plugin, hyperparameters, and what the
    LightningModule's on_save_checkpoint adds), with the seal of checkpoint
    file ``path`` (detcheck.verify_seal's errors and result).

    Set aside (taken from the seal: ``detcheck verify --seal`` checks them
    in the file): what Lightning hands to user objects' load_state_dict,
    whose state_dict() need not give it back -- the callbacks' states
    (``callbacks.*``: ModelCheckpoint's bookkeeping, restored only partly
    by design), a stateful DataLoader's (``loops.*.combined_loader.*``: a
    position to skip to) and the datamodule's."""
    from .._manifest import manifest_of_parts
    from .._seal import SealResult, load_seal, seal_path, verify_manifest
    path = os.fspath(path)
    if os.path.islink(path):  # ModelCheckpoint(save_last="link"): the file loaded is the one sealed
        path = os.path.realpath(path)
    gold = load_seal(path, require)
    if gold is None:  # unsealed, accepted with a warning (require=False)
        return SealResult(path, seal_path(path), False)
    datamodule = getattr(trainer, "datamodule", None)
    aside = ("callbacks.",) + ((type(datamodule).__qualname__ + ".",) if datamodule is not None else ())

    def set_aside(name):
        return name.startswith(aside) or (name.startswith("loops.") and ".combined_loader." in name)
    live = trainer._checkpoint_connector.dump_checkpoint(weights_only=False)
    kept = {n for n in list(gold.tensors) + list(gold.values) if set_aside(n)}
    return verify_manifest(path, manifest_of_parts([(live, "", None)], (gold, kept),
                                                   keep=lambda n: not set_aside(n)), require)


class _SealingCheckpointIO(_WrappingCheckpointIO):
    """The strategy's CheckpointIO, wrapped: every checkpoint file it
    writes (ModelCheckpoint's, ``trainer.save_checkpoint``'s) is handed to
    the callback right after it is written, with the dict Lightning wrote
    it from (the state in memory), to be sealed."""

    def __init__(self, checkpoint_io, callback):
        super().__init__(checkpoint_io)
        self._callback = callback

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        super().save_checkpoint(checkpoint, path, storage_options=storage_options)
        self._callback._written(checkpoint, path)

    def teardown(self):
        if self.checkpoint_io is not None:
            self.checkpoint_io.teardown()


class DetcheckCallback(Callback):
    """Records through :class:`detcheck.Recorder` (``out_dir``, ``every``,
    ``grads``: as Recorder.step; ``trace``, ``trace_steps``, ``dump_step``...:
    as Recorder).

    When ``DETCHECK_RECORD`` is set (``detcheck repro``), the run is recorded
    there instead, as :meth:`Recorder.from_env` sets it up (module traces by
    default); when neither it nor ``out_dir`` is given the callback does
    nothing. A traced recording is made at ``on_train_start`` (the
    LightningModule is traced); an untraced one (``out_dir`` without
    ``trace``) when the callback is made. ``ckpt_dir``: where the stop
    checkpoint goes when ``DETCHECK_CHECKPOINT_DIR`` is unset. ``seal``:
    seal every checkpoint file saved and check a resume against its seal;
    ``require_seal``: refuse (SealError) a resume from an unsealed
    checkpoint, else warn (see the module).

    ``replica_guard=N``: compare the data-parallel replicas every N
    optimizer steps and once after a resume (:class:`detcheck.ReplicaGuard`
    made at ``on_train_start``, ``cb.replica_guard``; None: off);
    ``replica_guard_on_mismatch`` and ``replica_guard_group``: the guard's
    ``on_mismatch`` and ``group``. What a "warn" guard or a callable
    returned is kept in ``cb.replica_mismatches``."""

    def __init__(self, out_dir=None, every=1, grads=True, trace=None, ckpt_dir=None, seal=True, require_seal=True,
                 replica_guard=None, replica_guard_on_mismatch="raise", replica_guard_group=None,
                 **recorder_kwargs):
        super().__init__()
        self.replica_every = guard_every(replica_guard)  # a bad N is refused now, not at the first step
        self.replica_on_mismatch, self.replica_group = replica_guard_on_mismatch, replica_guard_group
        self.replica_guard = None  # the detcheck.ReplicaGuard, made at on_train_start
        self.replica_mismatches = []  # what the guard returned (on_mismatch "warn" or a callable)
        self.recorder = None
        self.grads = grads
        self.seal, self.require_seal = seal, require_seal
        self.seal_result = None  # what the check of a resumed state found (a detcheck.SealResult)
        self._stop_path = None
        self._stop_state = None
        self.session = session()  # a bad DETCHECK_STOP_AT / DETCHECK_RESUME is refused now, not at step K
        self.ckpt_dir = ckpt_dir
        self._last = None
        self._batches = None
        self._make = None
        if record_dir() is not None:
            self._make = lambda model: Recorder.from_env(model=model, every=every, **recorder_kwargs)
        elif out_dir is not None:
            if trace in (None, "none"):
                self.recorder = Recorder(out_dir, every=every, **recorder_kwargs)
            else:
                self._make = lambda model: Recorder(out_dir, every=every, model=model, trace=trace,
                                                    **recorder_kwargs)

    def setup(self, trainer, pl_module, stage):
        if not self.seal:
            return
        strategy = trainer.strategy
        name = type(strategy).__name__
        if name == "DeepSpeedStrategy" or getattr(strategy, "_state_dict_type", "") == "sharded" or getattr(
                strategy, "_save_distributed_checkpoint", False):  # directories of shards, not through CheckpointIO
            warnings.warn("detcheck: %s writes sharded checkpoint directories, which this callback does not seal; "
                          "seal them with detcheck.seal(path, state) or `detcheck seal PATH`" % name, stacklevel=2)
        io = strategy.checkpoint_io
        if not isinstance(io, _SealingCheckpointIO):
            strategy.checkpoint_io = _SealingCheckpointIO(io, self)

    def _written(self, checkpoint, path):
        """Seals the checkpoint file just written from the dict it was
        written from (the stop checkpoint: through session().stopped)."""
        if not self.seal:
            return
        path = os.fspath(path)
        if not os.path.isfile(path):  # an asynchronous or remote CheckpointIO, a sharded (directory) strategy
            warnings.warn("detcheck: %s is not sealed: no checkpoint file there once the save returned"
                          % path, stacklevel=3)
            return
        if self._stop_path is not None and os.path.abspath(path) == self._stop_path:
            self._stop_state = checkpoint
            return
        from .._seal import seal
        seal(path, checkpoint, step=checkpoint.get("global_step"))

    def on_train_start(self, trainer, pl_module):
        self._last = trainer.global_step  # a resumed run starts past the checkpoint's step
        if self.recorder is None and self._make is not None:
            self.recorder = self._make(pl_module)
        if self.replica_every is not None:
            opts = trainer.optimizers
            if len(opts) > 1:
                warnings.warn("detcheck: replica_guard with %d optimizers: their states are not compared, "
                              "only the parameters and buffers" % len(opts), stacklevel=2)
            self.replica_guard = make_guard(pl_module, self._optimizer(trainer), self.replica_every,
                                            self.replica_on_mismatch, self.replica_group)
            if trainer.ckpt_path:  # resumed: everything is restored by now, before the first step
                self._replica_result(self.replica_guard.check(trainer.global_step))
        if self.seal and trainer.ckpt_path:
            self.seal_result = verify_resumed(trainer, trainer.ckpt_path, self.require_seal)

    def _open(self):
        return self.recorder is not None and not self.recorder.closed

    def _replica_result(self, mismatch):
        if mismatch is not None:
            self.replica_mismatches.append(mismatch)

    @staticmethod
    def _optimizer(trainer):
        opts = trainer.optimizers
        return opts[0] if len(opts) == 1 else None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self._batches is None:  # the step's first batch (the previous one stepped the optimizer)
            self._batches = []
            if self._open():
                self.recorder.start_step(pl_module, self._optimizer(trainer))
        self._batches.append(batch)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step == self._last:  # accumulating: no optimizer step this batch
            return
        self._last = step
        batches, self._batches = self._batches or [batch], None
        if self.replica_guard is not None:  # before the step is recorded and any checkpoint of it is saved
            self._replica_result(self.replica_guard.step(step))
        if self._open():
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            scaler = getattr(getattr(trainer, "precision_plugin", None), "scaler", None)
            self.recorder.step(step, loss=loss, model=pl_module, optimizer=self._optimizer(trainer),
                               grads=self.grads, batch=batches[0] if len(batches) == 1 else batches,
                               scaler=scaler)
        k = self.session.stop_at
        if k is not None and step == k:
            d = self.session.checkpoint_dir(self.ckpt_dir) or os.path.join(trainer.default_root_dir, "checkpoints")
            path = os.path.join(d, ckpt_name(step))
            self._stop_path, self._stop_state = os.path.abspath(path), None
            try:
                trainer.save_checkpoint(path)  # after step K's optimizer step: weights, optimizer, loops, loaders
            finally:
                self._stop_path = None
            trainer.should_stop = True
            state, self._stop_state = self._stop_state, None  # set where this process wrote the file
            self.session.stopped(step, checkpoint=path, state=state)

    def on_train_end(self, trainer, pl_module):
        if self.recorder is not None:
            self.recorder.close()

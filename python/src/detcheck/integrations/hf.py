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
precision fp16).

Sealed checkpoints (``seal=True``, the default; detcheck-seal(1)): at each
``on_save`` the callback seals ``checkpoint-N`` from memory -- the objects
the Trainer just wrote, rebuilt as transformers 5 builds them
(:func:`_checkpoint_files`: the weights as save_pretrained writes them,
the optimizer's, scheduler's and scaler's state_dict(), the RNG states of
rng_state.pth, which are the process's until the next step, the
TrainingArguments), named as ``detcheck hash checkpoint-N`` reads the
directory (:func:`checkpoint_manifest`), so ``detcheck verify --seal
checkpoint-N`` passes on the files. Nothing is read back from the files.
With several (DDP) processes each writes its rng_state_R.pth: on_save runs
on every process, each gives its RNG states, gathered
(all_gather_object over the default group), and the process that saves
(``args.should_save``) writes the one seal, world size the processes
(:func:`_together`: every process takes the same path, and what one
raises is raised on all, so none waits in a collective).
A setup whose files are others (DeepSpeed, FSDP, PEFT,
quantized or offloaded weights, XLA/NPU/HPU/MLU/MUSA), or a file in the
folder that is not rebuilt, is left unsealed with a warning saying why.

A run resumed with ``resume_from_checkpoint`` is checked against that
checkpoint's seal right after the Trainer restores its RNG states (at the
epoch's start or after the batches it skips; :func:`_trainer_call` finds
the Trainer and the checkpoint, which transformers does not hand
callbacks), before the first step: the weights, optimizer, scheduler,
scaler and RNG states as loaded. training_args.bin is never loaded back,
so its entries are the seal's there (``verify --seal`` checks the file).
With several processes each checks what it loaded and its own
rng_state_R.pth, and the verdicts are gathered: a difference one finds
is raised on every process. A checkpoint saved by another number of
processes: the rng_state files no process of this run restored are not
compared, named in a warning and in ``cb.seal_result.not_compared``.
A difference raises :class:`detcheck.SealError` (``.tensor``, ``.kind``,
``.files``: the file that holds it); an unsealed checkpoint too, unless
``require_seal=False`` (a warning). ``cb.seal_result`` is the check's
:class:`detcheck.SealResult`.

Replica guard (``replica_guard=N``; python/README.md, "Replica guard"): a
:class:`detcheck.ReplicaGuard` over the model and the optimizer the Trainer
hands callbacks (accelerate's wrapper taken off) compares the data-parallel
replicas every N optimizer steps, at ``on_optimizer_step`` (right after
``optimizer.step()``: the weights and optimizer state updated, before the
scheduler, ``on_step_end`` and any save of that step), as step
``state.global_step + 1``; and once at ``on_train_begin`` of a resumed run
(``guard.check()``: the weights and optimizer state are loaded by then,
before the first step), so a rank that loaded another checkpoint is caught
before it trains. ``replica_guard_on_mismatch`` is the guard's
``on_mismatch`` ("raise": :class:`detcheck.ReplicaMismatch` on every rank,
before the step's checkpoint is written; "warn"; a callable);
``replica_guard_group`` its ``group``."""
import os
import random
import sys
import warnings

from transformers import TrainerCallback

from .._recorder import Recorder
from .._settings import record_dir
from .._session import session, ENV_CHECKPOINT_DIR, ENV_RESUME
from ._replica import guard_every, make_guard

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


# ---------------------------------------------------------------- sealed checkpoints

SEAL_NAME = "detcheck-seal.yaml"  # detcheck._seal.SEAL_NAME: a directory's seal
WEIGHTS = "model.safetensors"
ARGS = "training_args.bin"
# names the directory reader skips as no checkpoint files (configs,
# tokenizers, trainer_state.json); an index (*.index.json) is read
_NOT_READ = (".json", ".txt", ".md", ".jinja", ".model", ".py", ".yaml", ".yml", ".tiktoken", ".vocab")


class _Unsealable(Exception):
    """What this callback cannot rebuild from memory in this setup (the
    message says what)."""


def _stem(name):
    """The namespace the directory reader gives a file's names when they
    collide with another file's (src/formats/open.c, file_stem)."""
    for suffix in (".zst", ".index.json"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
    dot = name.rfind(".")
    return name[:dot] if dot > 0 else name


def _weights_file(name):
    """model.safetensors, its shards model-N-of-M.safetensors, its index."""
    return name in (WEIGHTS, WEIGHTS + ".index.json") or (
        name.startswith("model-") and name.endswith(".safetensors") and "-of-" in name)


def _weights(model):
    """The state dict Trainer._save writes to model.safetensors (or its
    shards, under the same names), built as transformers 5's
    save_pretrained builds it: state_dict(), less _keys_to_ignore_on_save,
    less the tied copies (remove_tied_weights_from_state_dict), renamed
    back (revert_weight_conversion). A model that is no PreTrainedModel:
    its state_dict() as it is (safetensors.torch.save_file)."""
    from transformers import PreTrainedModel
    if type(model).__module__.split(".")[0] == "peft" or getattr(model, "_hf_peft_config_loaded", False):
        raise _Unsealable("a PEFT model (adapter files)")
    if not isinstance(model, PreTrainedModel):
        if hasattr(model, "_orig_mod"):
            raise _Unsealable("a torch.compile'd model")
        return model.state_dict()
    if getattr(model, "hf_quantizer", None) is not None:
        raise _Unsealable("a quantized model")
    if getattr(model.config, "distributed_config", None) is not None:
        raise _Unsealable("a TP/FSDP-sharded model")
    if {"cpu", "disk"} & set((getattr(model, "hf_device_map", None) or {}).values()):
        raise _Unsealable("a model with offloaded modules")
    try:
        from transformers.core_model_loading import revert_weight_conversion
        from transformers.modeling_utils import remove_tied_weights_from_state_dict
    except ImportError as e:  # another transformers: its save is not this one
        raise _Unsealable("transformers %s (save_pretrained's weights: %s)" % (_version(), e)) from None
    sd = model.state_dict()
    for k in model._keys_to_ignore_on_save or ():
        sd.pop(k, None)
    return revert_weight_conversion(model, remove_tied_weights_from_state_dict(sd, model))


def _version():
    import transformers
    return transformers.__version__


def _rng_file(args, process=None):
    """The file Trainer._save_rng_state writes the RNG states of process
    ``process`` (this one by default) to: rng_state.pth with one process,
    rng_state_R.pth with several."""
    if args.world_size <= 1:
        return "rng_state.pth"
    return "rng_state_%d.pth" % (args.process_index if process is None else process)


def _rng_states(args):
    """The dict Trainer._save_rng_state writes to this process's
    rng_state file: right after the save the process's RNG states are the
    ones it saved."""
    import numpy as np
    import torch
    from transformers.training_args import ParallelMode
    states = {"python": random.getstate(), "numpy": np.random.get_state(), "cpu": torch.random.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = (torch.cuda.random.get_rng_state_all() if args.parallel_mode == ParallelMode.DISTRIBUTED
                          else torch.cuda.random.get_rng_state())
    return states


def _checkpoint_files(args, model, optimizer, lr_scheduler):
    """[(file name, object, group)]: what Trainer._save_checkpoint writes
    into checkpoint-N with torch.save or safetensors in this setup, each
    with the group its file role gives its tensors (src/core/checkpoint.c
    file_roles, detcheck-formats(7) "File roles"; None: by their names).
    The RNG states are this process's only (its rng_state file).
    Raises _Unsealable for the setups whose files are others."""
    from transformers.utils import (is_sagemaker_mp_enabled, is_torch_hpu_available, is_torch_mlu_available,
                                    is_torch_musa_available, is_torch_npu_available, is_torch_xla_available)
    if args.deepspeed or getattr(args, "deepspeed_plugin", None) or getattr(args, "fsdp", None):
        raise _Unsealable("DeepSpeed or FSDP (their own checkpoint files)")
    for what, available in (("XLA", is_torch_xla_available), ("SageMaker MP", is_sagemaker_mp_enabled),
                            ("NPU", is_torch_npu_available), ("HPU", is_torch_hpu_available),
                            ("MLU", is_torch_mlu_available), ("MUSA", is_torch_musa_available)):
        if available():
            raise _Unsealable("%s (its RNG and save paths)" % what)
    files = [(WEIGHTS, _weights(model), None), (ARGS, args, "other")]
    if not args.save_only_model:
        files += [("optimizer.pt", optimizer.state_dict(), "optimizer"),
                  ("scheduler.pt", lr_scheduler.state_dict(), "other")]
        scaler = getattr(optimizer, "scaler", None)  # accelerate's GradScaler (Trainer._save_scaler)
        if scaler is not None:
            files.append(("scaler.pt", scaler.state_dict(), "other"))
        files.append((_rng_file(args), _rng_states(args), "rng"))
    return files


def _namespaces(units):
    """The directory reader's rule (src/formats/open.c, open_dir): the
    files' names are merged, unless two files share a tensor name or a
    value name; then every file holding a name another file holds is read
    under its stem (``optimizer.state.0.step``). units: [(stem, tensor
    names, value names)]; returns each unit's prefix ("" for none)."""
    import collections

    def owners(sets):
        c = collections.Counter()
        for names in sets:
            c.update(names)
        return c
    tensors = owners(set(t) for _, t, _ in units)
    values = owners(set(v) for _, _, v in units)
    if all(n == 1 for n in tensors.values()) and all(n == 1 for n in values.values()):
        return [""] * len(units)
    every = owners(set(t) | set(v) for _, t, v in units)
    return [stem if any(every[n] > 1 for n in set(t) | set(v)) else "" for stem, t, v in units]


def checkpoint_manifest(files, seal=None, from_seal=()):
    """The manifest ``detcheck hash checkpoint-N`` gives the directory
    holding ``files`` ([(file name, object, group)], as _checkpoint_files),
    digested from the objects. ``from_seal``: file names whose entries are
    taken from the Manifest ``seal`` instead (their names still come from
    the object). Returns (Manifest, {name: the file that holds it})."""
    from .._manifest import manifest_of_parts, names_of
    units = [(_stem(name),) + names_of(obj) for name, obj, _ in files]
    parts, copied, owners = [], set(), {}
    for (name, obj, group), prefix, (_, t, v) in zip(files, _namespaces(units), units):
        names = [prefix + "." + n if prefix else n for n in t + v]
        owners.update(dict.fromkeys(names, name))
        if name in from_seal:
            copied.update(names)
        else:
            parts.append((obj, prefix, group))
    return manifest_of_parts(parts, (seal, copied) if copied else None), owners


def _unmodeled(ckpt, files):
    """The files of ckpt the directory reader would read that are none of
    ``files``, and the ones of ``files`` that are not there."""
    names = {n for n, _, _ in files}
    present = sorted(os.listdir(ckpt))
    extra = [n for n in present
             if not (n.startswith(".") or n == SEAL_NAME or n in names or _weights_file(n)
                     or (n.endswith(_NOT_READ) and not n.endswith(".index.json"))
                     or not os.path.isfile(os.path.join(ckpt, n)))]  # subfolders are not read
    missing = [n for n in sorted(names) if not (n in present if n != WEIGHTS else any(map(_weights_file, present)))]
    return extra, missing


def _together(args, what, fn):
    """[fn() of every process of the Trainer's], in process order: with
    several processes the outcomes are gathered (all_gather_object over
    the default group, where the Trainer's processes are), so that every
    process takes the same path and none waits forever in a collective
    that another left. What any process raised is raised on every process
    (the first one's: its own exception on that process, _Unsealable and
    SealError as they are, anything else as a RuntimeError naming the
    process). One process: [fn()], its exceptions as they are."""
    import pickle
    from .._seal import SealError
    if args.world_size <= 1:
        return [fn()]
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        raise _Unsealable("%d processes without torch.distributed initialised (their parts cannot be gathered)"
                          % args.world_size)
    value, err = None, None
    try:
        value = fn()
    except Exception as e:  # noqa: BLE001 -- every process must learn it, or the others wait
        err = e
    try:
        sent = pickle.loads(pickle.dumps(err))
    except Exception:  # noqa: BLE001 -- an exception pickle cannot carry: its text
        sent = RuntimeError("%s: %s" % (type(err).__name__, err))
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, (value, sent))
    me = dist.get_rank()
    first = next((r for r, (_, e) in enumerate(out) if e is not None), None)
    if first == me:
        raise err
    if first is not None:
        e = out[first][1]
        if isinstance(e, (_Unsealable, SealError)):
            raise e
        raise RuntimeError("detcheck: process %d failed to %s: %s: %s" % (first, what, type(e).__name__, e))
    return [v for v, _ in out]


def _rng_part(files):
    return next((obj for _, obj, group in files if group == "rng"), None)


def seal_checkpoint(ckpt, step, args, model, optimizer, lr_scheduler):
    """Seals checkpoint-N right after the Trainer wrote it, from the state
    in memory (the objects the Trainer saved, rebuilt as it builds them).
    Called on every process: each gives its RNG states (its
    rng_state_R.pth), gathered; the process that saves writes the seal.
    Returns the seal's path there (None elsewhere); raises _Unsealable on
    every process when this setup's files are not all rebuilt so (the
    checkpoint is then left unsealed)."""
    from .._seal import seal_manifest
    files = []

    def mine():
        files[:] = _checkpoint_files(args, model, optimizer, lr_scheduler)
        return _rng_part(files)
    rngs = _together(args, "seal %s" % ckpt, mine)

    def write():
        if not (args.should_save and os.path.isdir(ckpt)):
            return None
        every = [f for f in files if f[2] != "rng"] + [
            (_rng_file(args, r), states, "rng") for r, states in enumerate(rngs) if states is not None]
        extra, missing = _unmodeled(ckpt, every)
        if extra or missing:
            raise _Unsealable("%s%s%s" % ("files this callback does not rebuild from memory: %s" % ", ".join(extra)
                                          if extra else "", "; " if extra and missing else "",
                                          "files the Trainer did not write: %s" % ", ".join(missing)
                                          if missing else ""))
        return seal_manifest(ckpt, checkpoint_manifest(every)[0], step=step, world_size=len(rngs))
    return _together(args, "seal %s" % ckpt, write)[0 if args.world_size <= 1 else args.process_index]


def _sealed_rng_files(gold):
    """The rng_state files whose entries the seal holds: rng_state_R.pth
    where its names are read under their stems (several processes; a seal
    made from the files, by ``detcheck seal``, says no world size), else
    rng_state.pth."""
    import re
    ranks = {int(m.group(1)) for n in list(gold.tensors) + list(gold.values)
             for m in [re.match(r"rng_state_(\d+)\.", n)] if m}
    return ["rng_state_%d.pth" % r for r in sorted(ranks)] or ["rng_state.pth"]


def verify_checkpoint(ckpt, args, model, optimizer, lr_scheduler, require=True):
    """Compares the state this process resumed with (the weights,
    optimizer, scheduler, scaler and its RNG states it loaded, digested in
    memory) with checkpoint ``ckpt``'s seal (detcheck.verify_seal's errors
    and result); no collective. training_args.bin is never loaded back (the
    resumed run's own arguments rule): its entries are the seal's, named as
    the run's arguments name them; ``detcheck verify --seal`` checks its
    file. So are the other processes' rng_state_R.pth (each process checks
    its own); those no process of this run restored (a checkpoint saved by
    another number of processes) are the result's ``not_compared``."""
    from .._seal import SealError, SealResult, load_seal, seal_path, verify_manifest
    gold = load_seal(ckpt, require)
    if gold is None:  # unsealed, accepted with a warning (require=False)
        return SealResult(ckpt, seal_path(ckpt), False)
    files = _checkpoint_files(args, model, optimizer, lr_scheduler)
    own, others = _rng_part(files), set()
    if own is not None:  # the seal's rng_state files, named from this process's states (the same names)
        sealed = _sealed_rng_files(gold)
        others = set(sealed) - {_rng_file(args)}
        files = [f for f in files if f[2] != "rng"] + [(n, own, "rng") for n in sealed]
    live, owners = checkpoint_manifest(files, gold, {ARGS} | others)
    restored = {_rng_file(args, r) for r in range(max(args.world_size, 1))}
    try:
        res = verify_manifest(ckpt, live, require)
        res.not_compared = sorted(others - restored)
        return res
    except SealError as e:
        held = owners.get(e.tensor)
        if held is None or e.files:
            raise
        raise SealError("%s (in %s)" % (e, held), path=e.path, tensor=e.tensor, kind=e.kind, files=[held],
                        differences=e.differences) from None


def _trainer_call():
    """(trainer, resume_from_checkpoint) of the Trainer loop that runs the
    callbacks, or (None, None). transformers hands callbacks neither the
    Trainer nor the checkpoint it resumed from, and restores the RNG states
    after on_train_begin (at the epoch's start, or after the batches it
    skips): both are arguments of Trainer._inner_training_loop, found up
    the stack."""
    f = sys._getframe(1)
    while f is not None:
        if f.f_code.co_name == "_inner_training_loop":
            trainer = f.f_locals.get("self")
            if hasattr(trainer, "_load_rng_state"):
                return trainer, f.f_locals.get("resume_from_checkpoint")
        f = f.f_back
    return None, None


class DetcheckCallback(TrainerCallback):
    """Records through :class:`detcheck.Recorder` (``out_dir``, ``every``,
    ``grads``: as Recorder.step; ``trace``, ``trace_steps``, ``dump_step``...:
    as Recorder).

    When ``DETCHECK_RECORD`` is set (``detcheck repro``), the run is recorded
    there instead, as :meth:`Recorder.from_env` sets it up (module traces by
    default); when neither it nor ``out_dir`` is given the callback does
    nothing. A traced recording is made at ``on_train_begin``, when the
    Trainer hands over the model; an untraced one (``out_dir`` without
    ``trace``) when the callback is made.

    ``seal``: seal every checkpoint-N saved and check a resume against its
    seal; ``require_seal``: refuse (SealError) a resume from an unsealed
    checkpoint, else warn (see the module).

    ``replica_guard=N``: compare the data-parallel replicas every N
    optimizer steps and once after a resume (:class:`detcheck.ReplicaGuard`
    made at ``on_train_begin``, ``cb.replica_guard``; None: off);
    ``replica_guard_on_mismatch`` and ``replica_guard_group``: the guard's
    ``on_mismatch`` and ``group``. What a "warn" guard or a callable
    returned is kept in ``cb.replica_mismatches``."""

    def __init__(self, out_dir=None, every=1, grads=True, trace=None, seal=True, require_seal=True,
                 replica_guard=None, replica_guard_on_mismatch="raise", replica_guard_group=None,
                 **recorder_kwargs):
        self.replica_every = guard_every(replica_guard)  # a bad N is refused now, not at the first step
        self.replica_on_mismatch, self.replica_group = replica_guard_on_mismatch, replica_guard_group
        self.replica_guard = None  # the detcheck.ReplicaGuard, made at on_train_begin
        self.replica_mismatches = []  # what the guard returned (on_mismatch "warn" or a callable)
        self.recorder = None
        self.grads = grads
        self.seal, self.require_seal = seal, require_seal
        self.resumed_from = None  # the checkpoint a resumed run loaded, until its seal is checked
        self.seal_result = None  # what the check of the resumed state found (a detcheck.SealResult)
        self._trainer = None
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

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.recorder is None and self._make is not None:
            self.recorder = self._make(model, None)
        trainer, ckpt = _trainer_call()
        if self.replica_every is not None:
            self.replica_guard = make_guard(model, getattr(optimizer, "optimizer", optimizer), self.replica_every,
                                            self.replica_on_mismatch, self.replica_group)
            if ckpt is not None or state.global_step > 0:  # resumed: weights and optimizer state are loaded
                self._replica_result(self.replica_guard.check(state.global_step))
        if self.seal:
            if ckpt is not None:  # a resumed run
                self.resumed_from = os.fspath(ckpt)
                # checked right after the Trainer restores the RNG states
                self._trainer = (trainer, trainer.__dict__.get("_load_rng_state"))
                restore = trainer._load_rng_state

                def load_then_check(checkpoint):
                    restore(checkpoint)
                    self._check_resumed(trainer.args, trainer.model, trainer.optimizer, trainer.lr_scheduler)
                trainer._load_rng_state = load_then_check
        return control

    def _unhook(self):
        if self._trainer is not None:
            (trainer, own), self._trainer = self._trainer, None
            if own is None:
                trainer.__dict__.pop("_load_rng_state", None)
            else:  # another's wrapper, put back
                trainer._load_rng_state = own

    def _check_resumed(self, args, model, optimizer, lr_scheduler):
        ckpt, self.resumed_from = self.resumed_from, None
        if ckpt is None:
            return
        self._unhook()
        try:
            res = _together(args, "check %s against its seal" % ckpt,
                            lambda: verify_checkpoint(ckpt, args, model, optimizer, lr_scheduler, self.require_seal))
            self.seal_result = res[0 if args.world_size <= 1 else args.process_index]
            if getattr(self.seal_result, "not_compared", None):
                warnings.warn("detcheck: %s was saved by another number of processes than this run's %d: %s "
                              "(RNG states no process of this run restored) not compared with the seal"
                              % (ckpt, args.world_size, ", ".join(self.seal_result.not_compared)), stacklevel=2)
        except _Unsealable as e:
            msg = "detcheck: cannot check the state resumed from %s against its seal: %s" % (ckpt, e)
            if self.require_seal:
                from .._seal import SealError
                raise SealError(msg + " (DetcheckCallback(require_seal=False) resumes unchecked)",
                                path=ckpt, kind="trouble") from None
            warnings.warn(msg + "; resumed unchecked (require_seal=False)", stacklevel=2)

    def on_step_begin(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
        # a Trainer that did not restore the RNG states (did not call
        # _load_rng_state): checked before the first step, the RNG as it is
        if self.resumed_from is not None:
            self._check_resumed(args, model, optimizer, lr_scheduler)
        return control

    def _flush(self, loss=None, grad_norm=None):
        if self.recorder is not None and not self.recorder.closed and self.recorder.pending is not None:
            self.recorder.finish(self.recorder.pending, loss=loss, grad_norm=grad_norm)

    def _replica_result(self, mismatch):
        if mismatch is not None:
            self.replica_mismatches.append(mismatch)

    def on_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        if self.replica_guard is not None:  # before the step's record, scheduler step and save
            self._replica_result(self.replica_guard.step(state.global_step + 1))
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

    def on_save(self, args, state, control, model=None, optimizer=None, lr_scheduler=None, **kwargs):
        ckpt = os.path.join(args.output_dir, "%s-%d" % (CHECKPOINT_PREFIX, state.global_step))
        if self.seal:  # on every process: each gives its RNG states
            try:
                seal_checkpoint(ckpt, state.global_step, args, model, optimizer, lr_scheduler)
            except _Unsealable as e:
                if args.should_save:
                    warnings.warn("detcheck: %s is not sealed: %s; a resume from it is refused unless "
                                  "DetcheckCallback(require_seal=False)" % (ckpt, e), stacklevel=2)
        if self._stop_step(state):
            self._flush()  # step K's line, even when it was not logged
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
        self._unhook()
        if self.recorder is not None and not self.recorder.closed:
            self._flush()
            self.recorder.close()
        return control

"""detcheck: bit-for-bit reproducibility checks inside PyTorch training.

- :func:`digest` -- digest v1 of a tensor (NumPy, torch CPU/CUDA, views,
  DTensors), equal to what ``detcheck hash`` gives the saved tensor.
- :func:`digest_shard` -- the whole tensor's digest from each rank's shard.
- :func:`hash_files` -- the manifest ``detcheck hash`` writes for checkpoint
  files or directories (no NumPy or torch needed).
- :func:`manifest` / :func:`verify` -- the manifest ``detcheck hash`` writes
  for a torch.save'd object, and its comparison with a golden one.
- :class:`Recorder` -- per-step trajectory and per-tensor digests that
  ``detcheck bisect`` reads, module or op traces inside a step
  (``trace=``), dumps of one step's traced outputs (``dump_step=``),
  and :meth:`Recorder.from_env` / :func:`autorecord` for recording switched
  on from the environment (``DETCHECK_RECORD``, as ``detcheck repro`` does).
- :func:`read_digests` / :func:`read_trace` -- read a recording back.
- :func:`seal` / :func:`verify_seal` -- sealed checkpoints: the digests of
  the state saved, written beside the checkpoint, checked against the state
  loaded after a restart (:class:`SealError` names what differs).
- :class:`ReplicaGuard` -- data-parallel replicas compared during the run
  (one 16-byte root a rank), the deviant rank named by majority
  (:class:`ReplicaMismatch`).
- :func:`session` -- the resume contract ``detcheck resume-check`` sets
  (``DETCHECK_STOP_AT``, ``DETCHECK_RESUME``, ``DETCHECK_CHECKPOINT_DIR``):
  when to stop, whether to resume, where checkpoints go.

The C library is libdetcheck (bound with ctypes); ``python -m detcheck``
runs the bundled command-line tool.
"""
from ._lib import DetcheckError, LIB_PATH
from ._digest import TensorDigest, digest
from ._shard import digest_shard
from ._manifest import Manifest, VerifyResult, Difference, manifest, verify, hash_files
from ._recorder import Recorder
from ._runs import read_digests, read_trace, first_difference, TraceEvent, TraceStep, compare_runs, RunsComparison
from ._seal import seal, verify_seal, SealError, SealResult
from ._replica import ReplicaGuard, ReplicaMismatch
from ._settings import settings as determinism_settings
from ._session import Session, session
from . import _state

_state.baseline()  # NumPy's and Python's RNG states now: left out of recordings while untouched


def autorecord(model, optimizer, last_step=0, **kwargs):
    """One line for a plain training loop: records the run when
    ``DETCHECK_RECORD`` is set (``detcheck repro`` sets it), else does
    nothing and returns None.

    Makes :meth:`Recorder.from_env` (model traces by default, settings from
    ``DETCHECK_THREADS`` / ``DETCHECK_DETERMINISTIC``) and records a step at
    every ``optimizer.step()`` through the optimizer's step post hook:
    steps count from 1; each holds the gradient norm (the 2-norm of all
    gradients, computed there), the learning rate, the digests of the
    gradients, parameters, buffers and optimizer state, and the loss if the
    loop hands it over with ``rec.loss(loss)`` (else null), and the step's
    state entries: the RNG states at the step's start (the model's first
    forward), the model's forward inputs of the step as ``data.batch``,
    every group's lr. ``last_step``: the steps already taken (a resumed run:
    the checkpoint's step K), so that the first one recorded is K+1. The
    Recorder is closed at interpreter exit (or by ``rec.close()``). Returns
    the Recorder."""
    from ._auto import autorecord as _auto
    return _auto(model, optimizer, last_step=last_step, **kwargs)

__version__ = "0.1.0"


def library_version():
    """The version string of the libdetcheck in use."""
    from . import _lib
    return _lib.version().decode()


__all__ = ["digest", "digest_shard", "hash_files", "manifest", "verify", "Manifest", "VerifyResult", "Difference",
           "Recorder", "read_digests", "read_trace", "first_difference", "TraceEvent", "TraceStep",
           "compare_runs", "RunsComparison", "seal", "verify_seal", "SealError", "SealResult",
           "ReplicaGuard", "ReplicaMismatch",
           "autorecord", "session", "Session", "determinism_settings", "TensorDigest", "DetcheckError", "library_version", "LIB_PATH"]

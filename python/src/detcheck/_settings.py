"""Recording switched on from the environment (what ``detcheck repro`` sets),
and the run header ``run.json`` every Recorder writes.

Environment (read by :meth:`Recorder.from_env`, :func:`autorecord` and the
Hugging Face and Lightning callbacks):

- ``DETCHECK_RECORD=DIR``: record into DIR (unset or empty: record nothing,
  and change no setting). With ``WORLD_SIZE`` > 1 only rank 0 (``RANK``)
  records; the other ranks get no Recorder.
- ``DETCHECK_TRACE=modules|ops|none`` (default ``modules``; ``none`` when no
  model is given).
- ``DETCHECK_TRACE_STEPS=1,3,5-8``: the traced steps (default every step).
- ``DETCHECK_DUMP_STEP=K``: dump step K's traced outputs (``dump_step``).
- ``DETCHECK_THREADS=N``: ``torch.set_num_threads(N)``.
- ``DETCHECK_STOP_AT=K``, ``DETCHECK_RESUME=1``, ``DETCHECK_CHECKPOINT_DIR``,
  ``DETCHECK_STOP_KILL=1``: the resume contract (``detcheck resume-check``),
  read by :func:`detcheck.session` (``_session.py``).
- ``DETCHECK_DETERMINISTIC=1``: ``torch.use_deterministic_algorithms(True)``,
  ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` when unset, cuDNN deterministic on and
  benchmark off, TF32 off for matmul and cuDNN. ``=0``: deterministic
  algorithms and cuDNN deterministic off, cuDNN benchmark on, TF32 on (the
  fast settings). Unset: the settings are left as they are.

These are applied before the Recorder is made, so ``run.json`` holds them.
"""
import json
import os
import sys
import warnings

from . import _lib

RUN_JSON = "run.json"
ENV_RECORD = "DETCHECK_RECORD"


def _versions(torch):
    cuda = getattr(torch.version, "cuda", None)
    cudnn = nccl = None
    try:
        v = torch.backends.cudnn.version()
        cudnn = None if v is None else str(v)
    except Exception:
        pass
    try:
        if cuda and torch.cuda.is_available():
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        pass
    gpus = []
    try:
        if torch.cuda.is_available():
            gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:
        pass
    return cuda, cudnn, nccl, gpus


def settings():
    """The determinism settings of this process, as run.json records them."""
    env = os.environ
    out = {"deterministic_algorithms": False, "CUBLAS_WORKSPACE_CONFIG": env.get("CUBLAS_WORKSPACE_CONFIG"),
           "cudnn_deterministic": False, "cudnn_benchmark": False, "tf32_matmul": False, "tf32_cudnn": False,
           "NCCL_ALGO": env.get("NCCL_ALGO"), "NCCL_PROTO": env.get("NCCL_PROTO"), "threads": None,
           "torch": None, "cuda": None, "cudnn": None, "nccl": None, "gpus": []}
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch
        except ImportError:
            return out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["deterministic_algorithms"] = bool(torch.are_deterministic_algorithms_enabled())
        out["cudnn_deterministic"] = bool(torch.backends.cudnn.deterministic)
        out["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        out["tf32_matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
        out["tf32_cudnn"] = bool(torch.backends.cudnn.allow_tf32)
    out["threads"] = int(torch.get_num_threads())
    out["torch"] = str(torch.__version__)
    out["cuda"], out["cudnn"], out["nccl"], out["gpus"] = _versions(torch)
    return out


def write_run_json(out_dir):
    """Writes out_dir/run.json atomically (the library's writer: a temporary
    name, fsync, rename): {"detcheck_run": 1, "argv": sys.argv, "settings":
    settings()}."""
    doc = {"detcheck_run": 1, "argv": [str(a) for a in getattr(sys, "argv", [])], "settings": settings()}
    data = (json.dumps(doc, indent=1, sort_keys=False) + "\n").encode()
    path = os.path.join(out_dir, RUN_JSON)
    _lib.check(_lib.write_file_atomic(path.encode(), data, len(data)))
    return doc


def _int_env(name, lo=0):
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    try:
        n = int(v, 10)
    except ValueError:
        n = None
    if n is None or n < lo:
        raise ValueError("detcheck: %s=%r is not an integer >= %d" % (name, v, lo))
    return n


def _steps_env(name):
    v = os.environ.get(name, "").strip()
    if not v:
        return None
    out = set()
    try:
        for part in v.split(","):
            part = part.strip()
            if "-" in part:
                a, b = part.split("-", 1)
                out.update(range(int(a), int(b) + 1))
            elif part:
                out.add(int(part))
    except ValueError:
        raise ValueError("detcheck: %s=%r: steps as 1,3,5-8" % (name, v)) from None
    return out


def apply_settings():
    """Applies DETCHECK_THREADS and DETCHECK_DETERMINISTIC (see the module)."""
    threads = _int_env("DETCHECK_THREADS", 1)
    det = os.environ.get("DETCHECK_DETERMINISTIC", "").strip()
    if det not in ("", "0", "1"):
        raise ValueError("detcheck: DETCHECK_DETERMINISTIC=%r (0 or 1)" % det)
    if threads is None and not det:
        return
    import torch
    if threads is not None:
        torch.set_num_threads(threads)
    if det:
        on = det == "1"
        if on:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.use_deterministic_algorithms(on)
            torch.backends.cudnn.deterministic = on
            torch.backends.cudnn.benchmark = not on
            torch.backends.cuda.matmul.allow_tf32 = not on
            torch.backends.cudnn.allow_tf32 = not on


def record_dir():
    """The directory DETCHECK_RECORD names for this rank, or None."""
    d = os.environ.get(ENV_RECORD, "")
    if not d:
        return None
    world = _int_env("WORLD_SIZE", 1) or 1
    if world > 1 and (_int_env("RANK", 0) or 0) != 0:
        return None
    return d


def from_env(cls, model=None, optimizer=None, **kwargs):
    d = record_dir()
    if d is None:
        return None
    apply_settings()
    trace = os.environ.get("DETCHECK_TRACE", "").strip() or ("modules" if model is not None else "none")
    if trace not in ("modules", "ops", "none"):
        raise ValueError("detcheck: DETCHECK_TRACE=%r (modules, ops or none)" % trace)
    if trace != "none" and model is None:
        trace = "none"
    kw = {"model": model, "optimizer": optimizer, "trace": trace}
    steps = _steps_env("DETCHECK_TRACE_STEPS")
    if steps is not None:
        kw["trace_steps"] = steps
    dump = _int_env("DETCHECK_DUMP_STEP", 0)
    if dump is not None and trace != "none":
        kw["dump_step"] = dump
    kw.update(kwargs)
    return cls(d, **kw)

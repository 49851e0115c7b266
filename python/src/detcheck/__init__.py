"""detcheck: bit-for-bit reproducibility checks inside PyTorch training.

- :func:`digest` -- digest v1 of a tensor (NumPy, torch CPU/CUDA, views,
  DTensors), equal to what ``detcheck hash`` gives the saved tensor.
- :func:`digest_shard` -- the whole tensor's digest from each rank's shard.
- :func:`manifest` / :func:`verify` -- the manifest ``detcheck hash`` writes
  for a torch.save'd object, and its comparison with a golden one.
- :class:`Recorder` -- per-step trajectory and per-tensor digests that
  ``detcheck bisect`` reads.

The C library is libdetcheck (bound with ctypes); ``python -m detcheck``
runs the bundled command-line tool.
"""
from ._lib import DetcheckError, LIB_PATH
from ._digest import TensorDigest, digest
from ._shard import digest_shard
from ._manifest import Manifest, VerifyResult, Difference, manifest, verify
from ._recorder import Recorder, read_digests

__version__ = "0.1.0"


def library_version():
    """The version string of the libdetcheck in use."""
    from . import _lib
    return _lib.version().decode()


__all__ = ["digest", "digest_shard", "manifest", "verify", "Manifest", "VerifyResult", "Difference",
           "Recorder", "read_digests", "TensorDigest", "DetcheckError", "library_version", "LIB_PATH"]

"""ctypes binding of libdetcheck (include/detcheck.h, detcheck_static.h).

The library is found, in this order, at $DETCHECK_LIB, next to this file
(``_native/libdetcheck.so.0``, bundled by ``pip install``), or as
``libdetcheck.so.0`` on the loader's search path. Only the functions the
package uses are declared; their prototypes mirror the header exactly.
"""
import ctypes
import ctypes.util
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = os.path.join(_HERE, "_native")

MAX_DIMS = 16
SEGMENT = 128

# dtype names the package maps (the library's dck_dtype_from_name decides
# their codes, and which of them this libdetcheck knows)
DTYPE_NAMES = ["BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64",
               "U64", "F8_E4M3", "F8_E5M2", "C64", "C128"]
GROUPS = ["weights", "optimizer", "rng", "other"]
CMP_KINDS = ["equal", "digest", "dtype", "shape", "missing", "extra", "file", "value"]

c_u64 = ctypes.c_uint64
c_size = ctypes.c_size_t
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
c_int = ctypes.c_int


class Digest(ctypes.Structure):
    _fields_ = [("high64", c_u64), ("low64", c_u64)]


class Lanes(ctypes.Structure):
    _fields_ = [("lo", c_u64), ("hi", c_u64)]


class ManifestTensor(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("group", c_int), ("dtype", c_int), ("ndim", c_int),
                ("shape", c_u64 * MAX_DIMS), ("digest", Digest)]


class ManifestValue(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("value", c_char_p)]


class ManifestFile(ctypes.Structure):
    _fields_ = [("path", c_char_p), ("bytes", c_u64), ("xxh128", Digest)]


class CmpEntry(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("kind", c_int),
                ("golden", ctypes.POINTER(ManifestTensor)), ("actual", ctypes.POINTER(ManifestTensor)),
                ("golden_value", ctypes.POINTER(ManifestValue)),
                ("actual_value", ctypes.POINTER(ManifestValue)),
                ("golden_file", ctypes.POINTER(ManifestFile)),
                ("actual_file", ctypes.POINTER(ManifestFile))]


class CmpResult(ctypes.Structure):
    _fields_ = [("n", c_size), ("entries", ctypes.POINTER(CmpEntry)),
                ("tensors_compared", c_size), ("tensors_equal", c_size)]


class StTensor(ctypes.Structure):
    """dck_st_tensor (detcheck_static.h): one tensor for the safetensors writer."""
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndim", c_int), ("shape", c_u64 * MAX_DIMS),
                ("data", c_void_p), ("global_ndim", c_int), ("global_shape", c_u64 * MAX_DIMS),
                ("offset", c_u64 * MAX_DIMS)]


class Options(ctypes.Structure):
    """dck_options (detcheck.h): how checkpoints are opened and hashed."""
    _fields_ = [("threads", c_int), ("iteration", ctypes.c_long), ("hash_files", c_int),
                ("progress", c_void_p), ("progress_ctx", c_void_p), ("megatron_merge", c_int),
                ("tp_split_rules", ctypes.POINTER(c_char_p)), ("ntp_split_rules", c_size),
                ("notice", c_void_p), ("notice_ctx", c_void_p)]


# dck_options.notice: void (*)(void *ctx, const char *msg)
NOTICE = ctypes.CFUNCTYPE(None, c_void_p, c_char_p)


class KV(ctypes.Structure):
    """dck_kv: one metadata entry."""
    _fields_ = [("key", c_char_p), ("value", c_char_p)]


# recorded runs (detcheck_static.h): the readers of tensor_digests.bin and trace.bin
class RecStep(ctypes.Structure):
    _fields_ = [("step", ctypes.c_long), ("n", c_size), ("first", c_size)]


class RecEntry(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32), ("digest", Digest)]


class Recording(ctypes.Structure):
    _fields_ = [("nnames", c_size), ("names", ctypes.POINTER(c_char_p)), ("kinds", ctypes.POINTER(ctypes.c_uint8)),
                ("nsteps", c_size), ("steps", ctypes.POINTER(RecStep)),
                ("nentries", c_size), ("entries", ctypes.POINTER(RecEntry))]


class TraceSlot(ctypes.Structure):
    _fields_ = [("present", ctypes.c_uint8), ("digest", Digest)]


class TraceEvent(ctypes.Structure):
    _fields_ = [("phase", ctypes.c_uint8), ("kind", ctypes.c_uint8), ("nin", ctypes.c_uint8),
                ("nout", ctypes.c_uint8), ("module", ctypes.c_uint32), ("op", ctypes.c_uint32),
                ("call", ctypes.c_uint32), ("slot", c_size)]


class TraceStep(ctypes.Structure):
    _fields_ = [("step", ctypes.c_long), ("truncated", ctypes.c_bool), ("n", c_size), ("first", c_size)]


class Trace(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("nnames", c_size), ("names", ctypes.POINTER(c_char_p)),
                ("nsteps", c_size), ("steps", ctypes.POINTER(TraceStep)),
                ("nevents", c_size), ("events", ctypes.POINTER(TraceEvent)),
                ("nslots", c_size), ("slots", ctypes.POINTER(TraceSlot))]


TRACE_AGREE, TRACE_OUTPUT, TRACE_EXECUTION = 0, 1, 2  # dck_trace_how


class TraceDiff(ctypes.Structure):
    _fields_ = [("how", c_int), ("step", ctypes.c_long), ("event", c_size),
                ("a", ctypes.POINTER(TraceEvent)), ("b", ctypes.POINTER(TraceEvent)),
                ("output", c_int), ("input", c_int), ("common", c_size), ("agreeing", c_size),
                ("truncated", c_size * 2), ("first_truncated", ctypes.c_long * 2), ("blind", c_size),
                ("first_blind", ctypes.c_long)]


class DetcheckError(RuntimeError):
    """A libdetcheck call failed; the message is the library's (it names the
    file or tensor and the problem). ``status`` is the dck_status name."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def _candidates():
    env = os.environ.get("DETCHECK_LIB")
    if env:
        return [env]
    out = [os.path.join(NATIVE, "libdetcheck.so.0"), os.path.join(NATIVE, "libdetcheck.so")]
    found = ctypes.util.find_library("detcheck")
    out.append(found or "libdetcheck.so.0")
    return out


def _load():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append("%s: no such file" % path)
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            errors.append(str(e))
    raise ImportError("detcheck: cannot load libdetcheck (set DETCHECK_LIB, or pip install the "
                      "package from the detcheck repository): " + "; ".join(errors))


lib, LIB_PATH = _load()


# dck_runs_compare's result (detcheck_static.h, "recorded runs"): mirrored
# field by field; python/tests/test_runs.py checks sizes and offsets
# against the C compiler's.
c_bool = ctypes.c_bool
c_long = ctypes.c_long


class RunsGap(ctypes.Structure):
    _fields_ = [("item", c_char_p), ("run", c_int), ("count", c_size), ("first", c_long), ("last", c_long),
                ("empty_side", c_bool), ("why", c_char_p), ("name", c_char_p)]


RUNS_MAX_GAPS = 16


class RunsEvent(ctypes.Structure):
    _fields_ = [("present", c_bool), ("phase", c_int), ("kind", c_int), ("module", c_char_p),
                ("op", c_char_p), ("call", ctypes.c_uint), ("nin", ctypes.c_uint), ("nout", ctypes.c_uint)]


class RunsTrace(ctypes.Structure):
    _fields_ = [("has", c_bool * 2), ("both", c_bool), ("found", c_bool), ("common", c_size),
                ("agreeing", c_size), ("truncated", c_size * 2), ("first_truncated", c_long * 2),
                ("version", ctypes.c_uint * 2), ("how", c_int), ("step", c_long), ("event", c_size),
                ("output", c_int), ("input", c_int), ("input_is_state", c_bool), ("a", RunsEvent),
                ("b", RunsEvent), ("bound", c_long), ("late", c_bool), ("ops", c_bool), ("unseen", c_bool),
                ("next", c_int), ("next_step", c_long)]


class RunsOpts(ctypes.Structure):
    _fields_ = [("allow_partial", c_bool), ("missing_steps", c_bool)]


class RunsResult(ctypes.Structure):
    _fields_ = [("last_step", c_long * 2), ("traj_differs", c_bool), ("traj_step", c_long),
                ("traj_detail", c_char_p), ("rec_has", c_bool * 2), ("rec_both", c_bool),
                ("rec_found", c_bool), ("rec_steps", c_size * 2), ("rec_common", c_size),
                ("rec_step", c_long), ("rec_kind", c_int), ("rec_name", c_char_p), ("rec_how", c_char_p),
                ("trace", RunsTrace), ("first_step", c_long), ("first_differing", c_char_p),
                ("ckpts", c_size * 2), ("ckpts_in_both", c_size), ("ckpt_agree", c_long),
                ("ckpt_differ", c_long), ("ckpt_a", c_void_p), ("ckpt_b", c_void_p),
                ("ckpt_diff", CmpResult), ("gaps", RunsGap * RUNS_MAX_GAPS), ("ngaps", c_size),
                ("found", c_bool), ("accepted", c_bool), ("different", c_bool)]



class ReplicaGroup(ctypes.Structure):
    """dck_replica_group (detcheck.h)."""
    _fields_ = [("root", Digest), ("nranks", c_size), ("ranks", ctypes.POINTER(ctypes.c_int))]


class ReplicaResult(ctypes.Structure):
    """dck_replica_result (detcheck.h): the verdict of a replica check."""
    _fields_ = [("rank", ctypes.c_int), ("nranks", ctypes.c_int), ("root", Digest), ("compared", ctypes.c_int),
                ("same", ctypes.c_int), ("majority", ctypes.c_int), ("ndeviant", c_size),
                ("deviant", ctypes.POINTER(ctypes.c_int)), ("tensor", ctypes.c_long), ("tensor_name", c_char_p),
                ("ngroups", c_size), ("groups", ctypes.POINTER(ReplicaGroup)), ("hosts", ctypes.POINTER(c_char_p))]

def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


_u64p = ctypes.POINTER(c_u64)
ERR_INVALID = 1  # dck_status DCK_ERR_INVALID: the enum of detcheck.h, frozen with the ABI
ERR_NOMEM = 7  # DCK_ERR_NOMEM
strerror = _fn("dck_strerror", c_char_p, c_int)
last_error = _fn("dck_last_error", c_char_p)
version = _fn("dck_version", c_char_p)
free = _fn("dck_free", None, c_void_p)
digest_buffer = _fn("dck_digest_buffer", c_int, c_int, _u64p, c_int, c_void_p, c_size, c_int,
                    ctypes.POINTER(Digest))
digest_to_hex = _fn("dck_digest_to_hex", None, Digest, ctypes.c_char * 33)
digest_from_hex = _fn("dck_digest_from_hex", c_int, c_char_p, ctypes.POINTER(Digest))
root_digest = _fn("dck_root_digest", Digest, ctypes.POINTER(c_char_p), ctypes.POINTER(Digest), c_size)
group_of_name = _fn("dck_group_of_name", c_int, c_char_p)
name_compare = _fn("dck_name_compare", c_int, c_char_p, c_char_p)
segments_sum = _fn("dck_segments_sum", Lanes, c_void_p, c_size, c_u64)
digest_finish = _fn("dck_digest_finish", Digest, c_int, _u64p, c_int, Lanes)
gpu_digest = _fn("dck_gpu_digest", c_int, c_int, _u64p, c_int, c_void_p, c_size, c_void_p,
                 ctypes.POINTER(Digest))
gpu_segments_sum = _fn("dck_gpu_segments_sum", c_int, c_void_p, c_size, c_u64, c_void_p,
                       ctypes.POINTER(Lanes))
replica_decide = _fn("dck_replica_decide", c_int, ctypes.POINTER(Digest), ctypes.c_int, ctypes.POINTER(Digest), c_size,
                     ctypes.POINTER(ReplicaResult))
replica_result_release = _fn("dck_replica_result_release", None, ctypes.POINTER(ReplicaResult))

options_init = _fn("dck_options_init", None, ctypes.POINTER(Options))
hash_paths = _fn("dck_hash_paths", c_int, ctypes.POINTER(c_char_p), c_size, ctypes.POINTER(Options),
                 ctypes.POINTER(c_void_p))
manifest_create = _fn("dck_manifest_create", c_int, ctypes.POINTER(c_void_p))
manifest_free = _fn("dck_manifest_free", None, c_void_p)
manifest_add_tensor = _fn("dck_manifest_add_tensor", c_int, c_void_p, ctypes.POINTER(ManifestTensor))
manifest_add_value = _fn("dck_manifest_add_value", c_int, c_void_p, c_char_p, c_char_p)
manifest_set_meta = _fn("dck_manifest_set_meta", c_int, c_void_p, c_char_p, c_char_p)
manifest_tensor_count = _fn("dck_manifest_tensor_count", c_size, c_void_p)
manifest_tensor_at = _fn("dck_manifest_tensor_at", ctypes.POINTER(ManifestTensor), c_void_p, c_size)
manifest_value_count = _fn("dck_manifest_value_count", c_size, c_void_p)
manifest_value_at = _fn("dck_manifest_value_at", ctypes.POINTER(ManifestValue), c_void_p, c_size)
manifest_finalize = _fn("dck_manifest_finalize", c_int, c_void_p)
manifest_root = _fn("dck_manifest_root", Digest, c_void_p)
manifest_save = _fn("dck_manifest_save", c_int, c_void_p, c_int, c_char_p)
manifest_load = _fn("dck_manifest_load", c_int, c_char_p, ctypes.POINTER(c_void_p))
manifest_compare = _fn("dck_manifest_compare", c_int, c_void_p, c_void_p, c_int,
                       ctypes.POINTER(CmpResult))
cmp_result_release = _fn("dck_cmp_result_release", None, ctypes.POINTER(CmpResult))
cmp_set_aside_layout_state = _fn("dck_cmp_set_aside_layout_state", c_int, c_void_p, c_void_p,
                                 ctypes.POINTER(CmpResult), ctypes.POINTER(CmpResult), c_char_p, c_size)
safetensors_write = _fn("dck_safetensors_write", c_int, c_char_p, ctypes.POINTER(StTensor), c_size,
                        ctypes.POINTER(KV), c_size, c_int)
write_file_atomic = _fn("dck_write_file_atomic", c_int, c_char_p, c_void_p, c_size)
recording_load = _fn("dck_recording_load", c_int, c_char_p, ctypes.POINTER(Recording))
recording_release = _fn("dck_recording_release", None, ctypes.POINTER(Recording))
trace_load = _fn("dck_trace_load", c_int, c_char_p, ctypes.POINTER(Trace))
trace_release = _fn("dck_trace_release", None, ctypes.POINTER(Trace))
trace_compare = _fn("dck_trace_compare", ctypes.c_bool, ctypes.POINTER(Trace), ctypes.POINTER(Trace),
                    ctypes.POINTER(TraceDiff))
run_open = _fn("dck_run_open", c_int, c_char_p, ctypes.POINTER(c_void_p))
run_free = _fn("dck_run_free", None, c_void_p)
runs_compare = _fn("dck_runs_compare", c_int, c_void_p, c_void_p, ctypes.POINTER(RunsOpts),
                   ctypes.POINTER(RunsResult))
runs_result_release = _fn("dck_runs_result_release", None, ctypes.POINTER(RunsResult))


def _dtype_codes():
    f = _fn("dck_dtype_from_name", c_int, c_char_p, ctypes.POINTER(c_int))
    codes = {}
    for n in DTYPE_NAMES:
        c = c_int()
        if f(n.encode(), ctypes.byref(c)) == 0:
            codes[n] = c.value
    clear_error()
    return codes


clear_error = _fn("dck_clear_error", None)
DTYPE_CODE = _dtype_codes()
DTYPES = {c: n for n, c in DTYPE_CODE.items()}


def check(status):
    """Raises DetcheckError with the library's message for a failed call."""
    if status:
        raise DetcheckError(strerror(status).decode(), last_error().decode("utf-8", "replace"))


def hex_of(d):
    buf = (ctypes.c_char * 33)()
    digest_to_hex(d, buf)
    return buf.value.decode()


def digest_of_hex(h):
    d = Digest()
    check(digest_from_hex(h.encode(), ctypes.byref(d)))
    return d


def shape_array(shape):
    shape = list(shape)
    if len(shape) > MAX_DIMS:
        raise ValueError("detcheck: more than %d dimensions" % MAX_DIMS)
    return (c_u64 * max(1, len(shape)))(*shape), len(shape)

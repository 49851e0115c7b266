#!/usr/bin/env python3
"""Digests of live PyTorch CUDA tensors, hashed in place on the GPU.

detcheck's GPU API (include/detcheck.h, "GPU") is called through ctypes with
each tensor's device pointer (tensor.data_ptr()): nothing is copied to the
host. The digests are the ones `detcheck hash` writes for a checkpoint of the
same tensors (digest v1), so a training job can log them every N steps and
compare them with a golden manifest, or across ranks and restarts.

    python3 examples/torch_cuda_hash.py [--lib build/libdetcheck.so] [--steps N] [--check]

--check also hashes every tensor on the CPU and in fragments and exits 1
unless all digests agree. Exit 2 without PyTorch, CUDA or the library.
"""
import argparse
import ctypes
import os
import sys

# dck_dtype, in the order of include/detcheck.h
DTYPES = ["bool", "uint8", "int8", "int16", "uint16", "float16", "bfloat16", "int32",
          "uint32", "float32", "float64", "int64", "uint64", "float8_e4m3fn", "float8_e5m2"]


class Digest(ctypes.Structure):
    _fields_ = [("high64", ctypes.c_uint64), ("low64", ctypes.c_uint64)]

    def hex(self):
        return "%016x%016x" % (self.high64, self.low64)


class Lanes(ctypes.Structure):
    _fields_ = [("lo", ctypes.c_uint64), ("hi", ctypes.c_uint64)]


class FragmentPartial(ctypes.Structure):
    _fields_ = [("offset", ctypes.c_uint64), ("length", ctypes.c_uint64), ("lanes", Lanes),
                ("head_len", ctypes.c_uint32), ("tail_len", ctypes.c_uint32),
                ("head", ctypes.c_uint8 * 128), ("tail", ctypes.c_uint8 * 128)]


class Detcheck:
    def __init__(self, path):
        lib = ctypes.CDLL(path)
        u64p = ctypes.POINTER(ctypes.c_uint64)
        lib.dck_last_error.restype = ctypes.c_char_p
        lib.dck_gpu_device_count.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.dck_gpu_digest.argtypes = [ctypes.c_int, u64p, ctypes.c_int, ctypes.c_void_p,
                                       ctypes.c_size_t, ctypes.c_void_p, ctypes.POINTER(Digest)]
        lib.dck_digest_buffer.argtypes = [ctypes.c_int, u64p, ctypes.c_int, ctypes.c_void_p,
                                          ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(Digest)]
        lib.dck_gpu_fragment_partial.argtypes = [ctypes.c_uint64, ctypes.c_uint64,
                                                 ctypes.c_void_p, ctypes.c_size_t,
                                                 ctypes.c_void_p, ctypes.POINTER(FragmentPartial)]
        lib.dck_tensor_hasher_create.argtypes = [ctypes.c_int, u64p, ctypes.c_int,
                                                 ctypes.POINTER(ctypes.c_void_p)]
        lib.dck_tensor_hasher_add.argtypes = [ctypes.c_void_p, ctypes.POINTER(FragmentPartial)]
        lib.dck_tensor_hasher_final.argtypes = [ctypes.c_void_p, ctypes.POINTER(Digest)]
        lib.dck_tensor_hasher_free.argtypes = [ctypes.c_void_p]
        lib.dck_root_digest.argtypes = [ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(Digest),
                                        ctypes.c_size_t]
        lib.dck_root_digest.restype = Digest
        self.lib = lib

    def _ok(self, status, what):
        if status != 0:
            raise RuntimeError("%s: %s" % (what, self.lib.dck_last_error().decode()))

    @staticmethod
    def _describe(t):
        name = str(t.dtype).replace("torch.", "")
        if name not in DTYPES:
            raise TypeError("dtype %s has no digest v1 name" % name)
        shape = (ctypes.c_uint64 * max(1, t.dim()))(*t.shape)
        return DTYPES.index(name), shape, t.dim(), t.numel() * t.element_size()

    def gpu_count(self):
        n = ctypes.c_int(0)
        if self.lib.dck_gpu_device_count(ctypes.byref(n)) != 0:
            return 0, self.lib.dck_last_error().decode()
        return n.value, ""

    def digest(self, t, stream=None):
        """Digest of a CUDA tensor, in place. A non-contiguous view is made
        contiguous first (a copy on the device): the digest is over the
        logical row-major bytes."""
        import torch
        if not t.is_contiguous():
            t = t.contiguous()
        dt, shape, nd, nbytes = self._describe(t)
        if stream is None:
            stream = torch.cuda.current_stream(t.device).cuda_stream
        out = Digest()
        self._ok(self.lib.dck_gpu_digest(dt, shape, nd, ctypes.c_void_p(t.data_ptr()), nbytes,
                                         ctypes.c_void_p(stream), ctypes.byref(out)),
                 "dck_gpu_digest")
        return out

    def digest_cpu(self, t):
        c = t.detach().contiguous().cpu()
        dt, shape, nd, nbytes = self._describe(c)
        out = Digest()
        self._ok(self.lib.dck_digest_buffer(dt, shape, nd, ctypes.c_void_p(c.data_ptr()), nbytes,
                                            0, ctypes.byref(out)), "dck_digest_buffer")
        return out

    def digest_fragments(self, t, cuts):
        """The digest from fragments [cuts[i], cuts[i+1]) of the tensor's
        bytes, as shards held by different GPUs would compute it."""
        import torch
        t = t.contiguous()
        dt, shape, nd, nbytes = self._describe(t)
        h = ctypes.c_void_p()
        self._ok(self.lib.dck_tensor_hasher_create(dt, shape, nd, ctypes.byref(h)), "hasher")
        stream = torch.cuda.current_stream(t.device).cuda_stream
        edges = [0] + sorted(cuts) + [nbytes]
        try:
            for a, b in zip(edges, edges[1:]):
                p = FragmentPartial()
                self._ok(self.lib.dck_gpu_fragment_partial(nbytes, a,
                                                           ctypes.c_void_p(t.data_ptr() + a),
                                                           b - a, ctypes.c_void_p(stream),
                                                           ctypes.byref(p)), "fragment")
                self._ok(self.lib.dck_tensor_hasher_add(h, ctypes.byref(p)), "add")
            out = Digest()
            self._ok(self.lib.dck_tensor_hasher_final(h, ctypes.byref(out)), "final")
            return out
        finally:
            self.lib.dck_tensor_hasher_free(h)

    def root(self, named):
        names = sorted(named)
        arr = (ctypes.c_char_p * len(names))(*[n.encode() for n in names])
        ds = (Digest * len(names))(*[named[n] for n in names])
        return self.lib.dck_root_digest(arr, ds, len(names))


def find_lib(given):
    if given:
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    for b in ("build", "build-gpu", "build-gpucheck"):
        p = os.path.join(here, "..", b, "libdetcheck.so")
        if os.path.exists(p):
            return p
    return "libdetcheck.so"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", help="path to libdetcheck.so")
    ap.add_argument("--steps", type=int, default=3, help="training steps (digests after each)")
    ap.add_argument("--check", action="store_true", help="compare with CPU and fragment digests")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch_cuda_hash: PyTorch is not installed", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torch_cuda_hash: no CUDA device visible to PyTorch", file=sys.stderr)
        return 2
    try:
        dck = Detcheck(find_lib(args.lib))
    except OSError as e:
        print("torch_cuda_hash: cannot load libdetcheck: %s" % e, file=sys.stderr)
        return 2
    n, why = dck.gpu_count()
    if n == 0:
        print("torch_cuda_hash: %s" % why, file=sys.stderr)
        return 2

    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(333, 257), torch.nn.GELU(),
                                torch.nn.Linear(257, 10)).to(dev, dtype=torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    bad = 0
    for step in range(1, args.steps + 1):
        x = torch.randn(64, 333, device=dev, dtype=torch.bfloat16)
        loss = model(x).float().square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        # live state: weights and AdamW moments, hashed where they are
        named = {}
        for name, p in model.named_parameters():
            named["model." + name] = p.detach()
            st = opt.state[p]
            for k in ("exp_avg", "exp_avg_sq"):
                if k in st:
                    named["optimizer.%s.%s" % (name, k)] = st[k]
        digests = {k: dck.digest(v) for k, v in named.items()}
        print("step %d  root %s  (%d tensors)" % (step, dck.root(digests).hex(), len(digests)))
        if args.check:
            for k, v in named.items():
                cpu = dck.digest_cpu(v).hex()
                nbytes = v.numel() * v.element_size()
                frag = dck.digest_fragments(v, [nbytes // 3 + 1, 2 * nbytes // 3 + 5]).hex()
                if not (digests[k].hex() == cpu == frag):
                    bad += 1
                    print("  MISMATCH %s gpu %s cpu %s fragments %s" % (k, digests[k].hex(), cpu,
                                                                      frag))
    # every dtype digest v1 names (that this PyTorch has)
    if args.check:
        for name in DTYPES:
            tdt = getattr(torch, name, None)
            if tdt is None:
                continue
            raw = torch.randint(0, 256, (3, 1001), dtype=torch.uint8, device=dev)
            try:
                t = raw.view(tdt) if torch.empty(0, dtype=tdt).element_size() == 1 else \
                    raw[:, :1000].contiguous().view(tdt)
            except (RuntimeError, TypeError):
                continue  # this PyTorch cannot view bytes as that dtype
            if dck.digest(t).hex() != dck.digest_cpu(t).hex():
                bad += 1
                print("  MISMATCH dtype %s" % name)
        print("check: %s" % ("all GPU digests equal the CPU's" if not bad else "%d mismatches" % bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

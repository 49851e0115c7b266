"""Digests of sharded tensors: each rank hashes the segments its shard holds
whole, the ranks add their lane sums with an integer all-reduce, and the few
segments split between ranks are stitched from their pieces (gathered) and
hashed identically on every rank. Integer sums are associative, so the result
is the whole tensor's digest for any sharding (man detcheck-digest(7))."""
import ctypes

from . import _lib
from ._tensors import TensorDigest, _plain, _cuda_stream, host_bytes, torch_dtype_name

SEG = _lib.SEGMENT
_MASK = (1 << 64) - 1


def _runs(local_shape, global_shape, offset, esize):
    """The contiguous runs of global bytes a box [offset, offset+local_shape)
    of a row-major tensor covers: (local byte start, global byte start, bytes)."""
    nd = len(global_shape)
    if nd == 0:
        yield 0, 0, esize
        return
    # k: the first dimension after which the box holds whole rows of the
    # global tensor, so one run spans dims k.. and there are prod(dims ..k) runs
    k = nd - 1
    while k > 0 and local_shape[k] == global_shape[k]:
        k -= 1
    inner = 1
    for d in range(k + 1, nd):
        inner *= global_shape[d]
    run = local_shape[k] * inner
    gstride = [1] * nd
    for d in range(nd - 2, -1, -1):
        gstride[d] = gstride[d + 1] * global_shape[d + 1]
    outer = list(local_shape[:k])
    count = 1
    for s in outer:
        count *= s
    if run == 0 or count == 0:
        return
    idx = [0] * len(outer)
    for r in range(count):
        g = sum((offset[d] + (idx[d] if d < k else 0)) * gstride[d] for d in range(nd)) if nd else 0
        yield r * run * esize, g * esize, run * esize
        for d in range(len(outer) - 1, -1, -1):
            idx[d] += 1
            if idx[d] < outer[d]:
                break
            idx[d] = 0


def _limbs(v):
    """A 64-bit value as four 16-bit limbs: their sums over up to 2^47 ranks
    cannot overflow an int64, so the all-reduce is exact (no wrap)."""
    return [(v >> (16 * i)) & 0xFFFF for i in range(4)]


def _unlimbs(l):
    return sum(int(x) << (16 * i) for i, x in enumerate(l)) & _MASK


def _box_text(box):
    off, shape = box
    return "[%s]" % ", ".join("%d:%d" % (o, o + n) for o, n in zip(off, shape))


def _check_coverage(boxes, global_shape, dt):
    """The boxes the contributing ranks hold must cover the global tensor
    exactly once, as the DCP reader checks a checkpoint's chunks
    (src/core/checkpoint.c): sorted by offset, no two overlap, and their
    elements add up to the whole (else a gap). Raises ValueError naming the
    ranks and their ranges. boxes: [(rank, (offset, shape) or None)]."""
    nd = len(global_shape)
    total = 1
    for s in global_shape:
        total *= s
    live = []
    for r, b in boxes:
        if b is None:
            continue
        n = 1
        for s in b[1]:
            n *= s
        if n:
            live.append((tuple(b[0]), r, b, n))
    live.sort()
    what = "a %s tensor %s" % (dt, tuple(global_shape))
    # sweep along dimension 0: boxes sorted by their first offset, each
    # compared with those that start before it ends there
    for i in range(len(live)):
        oi, ri, bi, _ = live[i]
        for j in range(i + 1, len(live)):
            oj, rj, bj, _ = live[j]
            if nd and oj[0] >= oi[0] + bi[1][0]:
                break
            if all(oj[d] < oi[d] + bi[1][d] and oi[d] < oj[d] + bj[1][d] for d in range(nd)):
                raise ValueError("detcheck.digest_shard: the shards of rank %d %s and rank %d %s overlap "
                                 "in %s (each element must be held by one contributing rank; a replica "
                                 "passes contribute=False)" % (ri, _box_text(bi), rj, _box_text(bj), what))
    covered = sum(n for _, _, _, n in live)
    if covered != total:
        held = ", ".join("rank %d %s" % (r, _box_text(b)) for _, r, b, _ in live[:16])
        if len(live) > 16:
            held += ", ... (%d shards)" % len(live)
        gap = ""
        if nd and all(b[1][1:] == tuple(global_shape[1:]) and not any(b[0][1:]) for _, _, b, _ in live):
            at = 0  # whole rows: name the first missing rows of dimension 0
            for o, _, b, _ in live:
                if o[0] > at:
                    break
                at = max(at, o[0] + b[1][0])
            nxt = [o[0] for o, _, _, _ in live if o[0] > at]
            gap = "; rows %d:%d of dimension 0 are held by no rank" % (at, min(nxt) if nxt else global_shape[0])
        raise ValueError("detcheck.digest_shard: the shards hold %d of the %d elements of %s (a gap%s); "
                         "held: %s" % (covered, total, what, gap, held or "nothing"))


def digest_shard(local, global_shape, offset, group=None, contribute=True):
    """The digest of a whole tensor from the shard each rank holds.

    A collective over ``group`` (torch.distributed; None: the default group):
    every rank calls it with its own ``local`` tensor, the box it holds,
    ``local`` being the global tensor's elements [offset, offset + local.shape)
    (``offset``: one start index per dimension, as DCP's chunk offsets), and
    every rank gets the same :class:`TensorDigest` -- the one ``detcheck hash``
    gives the whole tensor, whatever the split. A rank holding a replica that
    another rank also contributes passes ``contribute=False``. The ranks
    exchange their boxes and check that they cover every element exactly
    once, as detcheck hash checks a DCP checkpoint's chunks: overlapping
    shards (also when a gap elsewhere makes the byte count match) and gaps
    raise ValueError on every rank, naming the ranks and their ranges."""
    return digest_shards([(local, global_shape, offset, contribute)], group=group)[0]


class _Part:
    """One rank's part of a sharded tensor's digest: the lane sums of the
    segments it holds whole, the bytes it holds of the others, its box."""
    __slots__ = ("dt", "global_shape", "total", "vec", "box", "pieces")


def _shard_part(local, global_shape, offset, contribute):
    import torch

    dt = torch_dtype_name(local)
    global_shape = tuple(int(s) for s in global_shape)
    offset = tuple(int(o) for o in offset)
    if len(offset) != len(global_shape) or local.dim() != len(global_shape):
        raise ValueError("detcheck.digest_shard: shard of %d dims, global shape %s, offset %s"
                         % (local.dim(), global_shape, offset))
    for d in range(len(global_shape)):
        if offset[d] < 0 or offset[d] + local.shape[d] > global_shape[d]:
            raise ValueError("detcheck.digest_shard: shard %s at %s outside %s"
                             % (tuple(local.shape), offset, global_shape))
    x = _plain(local)
    es = x.element_size()
    total = es
    for s in global_shape:
        total *= s
    lanes_lo = lanes_hi = covered = 0
    edges = []  # (global offset, bytes) of segments this rank holds only part of
    cuda = x.device.type == "cuda"
    base = x.data_ptr()
    if contribute:
        for lstart, gstart, n in _runs(tuple(x.shape), global_shape, offset, es):
            gend = gstart + n
            a = -(-gstart // SEG) * SEG          # first segment boundary inside
            b = gend if gend == total else gend // SEG * SEG  # the last short segment is whole
            # head [gstart, min(a, gend)) and tail [max(a, b), gend): pieces of
            # segments shared with other runs; [a, b): whole segments
            h = min(a, gend)
            if h > gstart:
                edges.append((gstart, lstart, h - gstart))
            t0 = max(a, b, gstart)
            if gend > t0 and t0 >= h:
                edges.append((t0, lstart + (t0 - gstart), gend - t0))
            covered += n
            if b <= a:
                continue
            ptr = ctypes.c_void_p(base + lstart + (a - gstart))
            if cuda:
                ln = _lib.Lanes()
                _lib.check(_lib.gpu_segments_sum(ptr, b - a, a // SEG, _cuda_stream(x),
                                                 ctypes.byref(ln)))
            else:
                ln = _lib.segments_sum(ptr, b - a, a // SEG)
            lanes_lo = (lanes_lo + ln.lo) & _MASK
            lanes_hi = (lanes_hi + ln.hi) & _MASK
    # the edge bytes, copied out (a CUDA shard's few edge bytes through the host)
    flat = x.reshape(-1).view(torch.uint8) if x.numel() and edges else None
    p = _Part()
    p.dt, p.global_shape, p.total = dt, global_shape, total
    p.pieces = [(g, bytes(host_bytes(flat[l:l + n]))) for g, l, n in edges]
    p.vec = _limbs(lanes_lo) + _limbs(lanes_hi) + _limbs(covered)
    p.box = (offset, tuple(int(s) for s in x.shape)) if contribute else None
    return p


def _shard_finish(p, vec, boxes, pieces):
    """The whole tensor's digest from the ranks' summed limbs, boxes and
    edge pieces (the same on every rank, so every rank raises the same)."""
    dt, global_shape, total = p.dt, p.global_shape, p.total
    _check_coverage(boxes, global_shape, dt)
    lanes_lo, lanes_hi, covered = _unlimbs(vec[0:4]), _unlimbs(vec[4:8]), _unlimbs(vec[8:12])
    # stitch the split segments, in offset order, and hash each once
    segs = {}
    for g, data in sorted(pieces):
        segs.setdefault(g // SEG, []).append((g, data))
    for j, parts in sorted(segs.items()):
        want = min(SEG, total - j * SEG)
        buf = bytearray()
        for g, data in parts:
            if g != j * SEG + len(buf):
                raise ValueError("detcheck.digest_shard: shards overlap or leave a gap at byte %d of "
                                 "a %s tensor %s" % (g, dt, global_shape))
            buf += data
        if len(buf) != want:
            raise ValueError("detcheck.digest_shard: the shards hold %d of the %d bytes of segment %d "
                             "of a %s tensor %s" % (len(buf), want, j, dt, global_shape))
        cbuf = (ctypes.c_char * len(buf)).from_buffer(buf)
        ln = _lib.segments_sum(ctypes.cast(cbuf, ctypes.c_void_p), len(buf), j)
        lanes_lo = (lanes_lo + ln.lo) & _MASK
        lanes_hi = (lanes_hi + ln.hi) & _MASK
    if covered != total:
        raise ValueError("detcheck.digest_shard: the shards hold %d bytes of a %s tensor %s of %d bytes "
                         "(overlap or gap; a replica must pass contribute=False)"
                         % (covered, dt, global_shape, total))
    arr, nd = _lib.shape_array(global_shape)
    d = _lib.digest_finish(_lib.DTYPE_CODE[dt], arr, nd, _lib.Lanes(lanes_lo, lanes_hi))
    return TensorDigest(_lib.hex_of(d), dt, global_shape)


def digest_shards(items, group=None):
    """:func:`digest_shard` of many tensors in two collectives in all: one
    integer all-reduce of every tensor's limbs and one gather of the boxes
    and edge bytes. items: [(local, global_shape, offset, contribute)], the
    same tensors in the same order on every rank of ``group``. Returns
    their :class:`TensorDigest` s, in order."""
    import torch
    import torch.distributed as dist

    parts = [_shard_part(*it) for it in items]
    world = dist.is_available() and dist.is_initialized()
    if not world:
        return [_shard_finish(p, p.vec, [(0, p.box)], p.pieces) for p in parts]
    n = dist.get_world_size(group)
    shapes = [(p.dt, p.global_shape) for p in parts]
    mine = ([(p.box, p.pieces) for p in parts], shapes)
    gathered = [None] * n
    dist.all_gather_object(gathered, mine, group=group)
    for r, (_, theirs) in enumerate(gathered):
        if theirs != shapes:  # a different list of tensors: the sums would mix them
            k = next((i for i, (a, b) in enumerate(zip(theirs, shapes)) if a != b), min(len(theirs), len(shapes)))
            raise ValueError("detcheck.digest_shards: rank %d digests %d tensors, this rank %d; they part at "
                             "tensor %d (%s here, %s there): every rank must pass the same tensors in the same "
                             "order" % (r, len(theirs), len(shapes), k, shapes[k] if k < len(shapes) else None,
                                        theirs[k] if k < len(theirs) else None))
    vec = [v for p in parts for v in p.vec]
    if vec:
        dev = "cuda" if dist.get_backend(group) == "nccl" else "cpu"
        t = torch.tensor(vec, dtype=torch.int64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
        vec = t.cpu().tolist()
    out = []
    for i, p in enumerate(parts):
        boxes = [(r, g[0][i][0]) for r, g in enumerate(gathered)]
        pieces = [pc for g in gathered for pc in g[0][i][1]]
        out.append(_shard_finish(p, vec[12 * i:12 * i + 12], boxes, pieces))
    return out


def dtensor_item(x):
    """A DTensor as an item of :func:`digest_shards` and the group its
    mesh spans: its local shard's box from its mesh and placements; of the
    ranks holding a replica only those at coordinate 0 of each replicated
    mesh dimension contribute."""
    import torch.distributed as dist
    try:
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:  # older torch
        from torch.distributed._tensor import Replicate, Shard
        from torch.distributed._tensor._utils import compute_local_shape_and_global_offset
    mesh = x.device_mesh
    contribute = True
    for i, p in enumerate(x.placements):
        if isinstance(p, Replicate):
            contribute = contribute and mesh.get_local_rank(i) == 0
        elif not isinstance(p, Shard):
            raise ValueError("detcheck.digest: a DTensor with placement %s; reduce it first "
                             "(redistribute to Shard or Replicate)" % p)
    _, offset = compute_local_shape_and_global_offset(x.shape, mesh, x.placements)
    if mesh.ndim == 1:
        group = mesh.get_group()
    elif mesh.size() == dist.get_world_size():
        group = None
    else:
        raise ValueError("detcheck.digest: a DTensor on a %d-dimensional mesh smaller than the world; "
                         "use digest_shard with a group of its ranks" % mesh.ndim)
    return (x.to_local(), tuple(x.shape), tuple(offset), contribute), group


def digest_dtensor(x):
    """digest_shard for a DTensor (see :func:`dtensor_item`)."""
    item, group = dtensor_item(x)
    return digest_shards([item], group=group)[0]

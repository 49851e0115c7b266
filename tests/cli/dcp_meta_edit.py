"""Damaged copies of DCP fixtures for test_dcp_meta.sh: for each line
"FIXTURE CASE" on stdin, copies SRCDIR/FIXTURE to FIXTURE_CASE (in the
current folder) and rewrites its .metadata (the pickled Metadata) with one
lie from the table below, each a fact that the metadata states and the
stored chunks state too.  One process for all copies: torch loads once.
Needs torch (the Metadata classes): exits 77 without it.
Usage: dcp_meta_edit.py SRCDIR < cases"""
import pickle
import shutil
import sys

try:
    import torch
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex
except ImportError:
    sys.exit(77)


def tensor(m, fqn):
    return m.state_dict_metadata[fqn]


def storage_key(m, fqn, offsets):
    return next(k for k in m.storage_data if k.fqn == fqn and tuple(k.offset) == tuple(offsets))


def set_dtype(fqn, dtype):
    def edit(m):
        tensor(m, fqn).properties.dtype = dtype
    return edit


def set_size(fqn, size):
    """The global size and the single chunk's size both say SIZE."""
    def edit(m):
        t = tensor(m, fqn)
        t.size = torch.Size(size)
        t.chunks = [ChunkStorageMetadata(offsets=t.chunks[0].offsets, sizes=torch.Size(size))]
    return edit


def set_global_size(fqn, size):
    def edit(m):
        tensor(m, fqn).size = torch.Size(size)
    return edit


def move_chunk(fqn, index, offsets):
    """Chunk INDEX (and its storage_data key) placed at OFFSETS."""
    def edit(m):
        t = tensor(m, fqn)
        old = t.chunks[index]
        k = storage_key(m, fqn, old.offsets)
        info = m.storage_data.pop(k)
        m.storage_data[MetadataIndex(fqn, torch.Size(offsets), k.index)] = info
        t.chunks[index] = ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=old.sizes)
    return edit


def drop_chunk(fqn, index, keep_storage):
    def edit(m):
        t = tensor(m, fqn)
        old = t.chunks.pop(index)
        if not keep_storage:
            del m.storage_data[storage_key(m, fqn, old.offsets)]
    return edit


def no_chunks(fqn):
    def edit(m):
        t = tensor(m, fqn)
        for c in t.chunks:
            del m.storage_data[storage_key(m, fqn, c.offsets)]
        t.chunks = []
    return edit


def set_length(fqn, delta):
    def edit(m):
        k = storage_key(m, fqn, tensor(m, fqn).chunks[0].offsets)
        m.storage_data[k].length += delta
    return edit


def stray_storage(fqn, offsets):
    """A storage_data entry that no chunk of the metadata names."""
    def edit(m):
        k = storage_key(m, fqn, tensor(m, fqn).chunks[0].offsets)
        m.storage_data[MetadataIndex(fqn, torch.Size(offsets))] = m.storage_data[k]
    return edit


def add_empty(fqn, size, dtype):
    """A tensor of no elements that .metadata declares with no chunks (a
    sharded save whose ranks held none of it): DCP's loaders create it."""
    def edit(m):
        from torch.distributed.checkpoint.metadata import TensorProperties, TensorStorageMetadata
        m.state_dict_metadata[fqn] = TensorStorageMetadata(
            properties=TensorProperties(dtype=dtype), size=torch.Size(size), chunks=[])
    return edit


DUP_MARK = "\x01dup\x01"


def duplicate_storage(fqn, other):
    """storage_data lists the chunk of FQN twice: the second entry points at
    OTHER's bytes (Python keeps the last one; a reader that keeps the first
    loads different data).  Written under a stand-in name, renamed below."""
    def edit(m):
        k = storage_key(m, fqn, tensor(m, fqn).chunks[0].offsets)
        o = storage_key(m, other, tensor(m, other).chunks[0].offsets)
        stand_in = fqn[:-len(DUP_MARK)] + DUP_MARK if len(fqn) > len(DUP_MARK) else None
        assert stand_in and len(stand_in) == len(fqn)
        m.storage_data[MetadataIndex(stand_in, k.offset)] = m.storage_data[o]
        return lambda b: b.replace(stand_in.encode(), fqn.encode())
    return edit


CASES = {
    "none": lambda m: None,
    # dtype: the metadata's (what DCP's loaders create) against the chunk's
    "dtype_bf16": set_dtype("model.bias", torch.bfloat16),
    "dtype_bf16_sharded": set_dtype("model.w", torch.bfloat16),
    "dtype_f32_of_bf16": set_dtype("model.emb", torch.float32),
    # sizes: the chunk's size against the stored tensor's shape and bytes
    "chunk_size": set_size("model.bias", (6,)),
    "chunk_size_2d": set_size("model.w", (5, 6)),
    # chunks against the global shape
    "global_larger": set_global_size("model.bias", (8,)),
    "global_smaller": set_global_size("model.w", (4, 7)),
    "chunk_out_of_bounds": move_chunk("model.w", 1, (4, 0)),
    "chunks_overlap": move_chunk("model.w", 1, (2, 0)),
    "chunk_missing": drop_chunk("model.w", 1, False),
    "chunk_missing_storage_kept": drop_chunk("model.w", 1, True),
    "no_chunks": no_chunks("model.bias"),
    # storage_data against the .distcp files and the chunks
    "length_beyond_file": set_length("model.bias", 1 << 20),
    "length_short": set_length("model.bias", -4),
    "length_long": set_length("model.bias", 4),
    "stray_storage": stray_storage("model.bias", (3,)),
    "duplicate_storage": duplicate_storage("model.bias", "model.w"),
    # a tensor without elements, and so without chunks
    "empty_tensor": add_empty("model.gone", (0, 4), torch.bfloat16),
}


def rewrite(src, out, case):
    with open(src + "/.metadata", "rb") as f:
        m = pickle.load(f)
    patch = CASES[case](m)
    b = pickle.dumps(m)
    if patch:
        b = patch(b)
    shutil.copytree(src, out)
    with open(out + "/.metadata", "wb") as f:
        f.write(b)


def main():
    for line in sys.stdin:
        if line.split():
            fixture, case = line.split()
            rewrite(sys.argv[1] + "/" + fixture, fixture + "_" + case, case)


if __name__ == "__main__":
    main()

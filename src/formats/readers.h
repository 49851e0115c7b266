/* Helpers shared by the PyTorch, DCP, Megatron and NumPy readers. */
#ifndef DCK_READERS_H
#define DCK_READERS_H

#include "formats/formats.h"
#include "formats/pickle.h"
#include "common/zip.h"

/* Bytes a reader decoded (inflated .npz members, arrays written as text in
 * a pickle) live in one unlinked temporary file per reader call, added to
 * the checkpoint as a file without relpath: hashed like any other, never
 * listed in the manifest's files. */
typedef struct {
    dck_checkpoint *ck;
    const char *label;
    uint32_t index;
    bool open;
    uint64_t size;
} dck_memfile;

dck_status dck_memfile_append(dck_memfile *m, const void *data, size_t len, uint32_t *file,
                              uint64_t *offset);
/* A zip entry's contents, inflated in 1 MiB pieces (memory does not grow
 * with the entry; disk does, bounded by deflate's ratio). */
dck_status dck_memfile_add_entry(dck_memfile *m, const dck_zip_entry *e, const uint8_t *zip_data,
                                 const char *label, uint32_t *file, uint64_t *offset);
/* Reads back bytes [off, off+len) of the decoded file. */
dck_status dck_memfile_read(dck_memfile *m, uint64_t off, void *buf, size_t len);

/* Fills a piece for a tensor of ndim dims with the given element strides;
 * strides are dropped when they are row-major contiguous. Checks the extent
 * (elements from element offset `first`) against avail bytes. */
dck_status dck_rd_piece(const char *label, const char *name, dck_dtype dtype, int ndim,
                        const uint64_t *shape, const int64_t *strides, uint64_t first,
                        uint64_t base_offset, uint64_t avail, uint32_t file, bool byteswap,
                        dck_piece *out);

/* A torch.save zip archive held in bytes [0, len) of file `file` at offset
 * base (a .pt file: base 0; a chunk inside a .distcp file: its offset).
 * Adds its tensors named prefix.path and its values. With root_tensor_name
 * set, a root object that is a single tensor gets that name (DCP chunks),
 * and placement is given by gshape/goffset (NULL: the tensor is whole). */
typedef struct {
    const char *prefix;          /* name prefix, "" none */
    const char *root_name;       /* name for a root that is a tensor */
    const uint64_t *gshape;      /* DCP: global shape of the chunk's tensor */
    const uint64_t *goffset;     /* DCP: chunk offset in it */
    int gndim;
    bool values;                 /* record values */
    bool unwrap_single;          /* a root that is a one-element list or
                                    tuple is walked as its element */
} dck_pt_opts;

dck_status dck_pt_load_zip(dck_checkpoint *ck, uint32_t file, const uint8_t *data, uint64_t len,
                           uint64_t base, const char *label, const dck_pt_opts *o,
                           dck_memfile *mem);
/* Any torch.save file (zip, legacy, tar) already added as file `file`. */
dck_status dck_pt_load_file(dck_checkpoint *ck, uint32_t file, const dck_pt_opts *o);
/* Opens path, adds it to ck (relpath) and loads it. */
dck_status dck_pt_open_path(dck_checkpoint *ck, const char *path, const char *relpath,
                            const dck_pt_opts *o);

/* A torch.distributed.checkpoint directory (dcp.c): its .metadata and
 * .distcp files, tensors named by their fully qualified names. Megatron's
 * torch_dist checkpoints are read through it. */
dck_status dck_dcp_load_dir(dck_checkpoint *ck, const char *dir, const char *relroot);

/* npz members or a whole .npy in bytes (npy_header.c). */
dck_status dck_npy_parse_header(const uint8_t *data, uint64_t len, const char *label,
                                dck_dtype *dtype, bool *byteswap, bool *fortran, int *ndim,
                                uint64_t *shape, uint64_t *data_offset);

bool dck_is_npy(const uint8_t *head, size_t n); /* npy_header.c */
bool dck_is_zip(const uint8_t *head, size_t n);
bool dck_is_legacy_torch(const uint8_t *head, size_t n);
bool dck_is_tar(const uint8_t *head, size_t n);

#endif

/* core/: the checkpoint model (files, pieces, validation, logical reads),
 * digest v1 internals and manifests. Depends on common/ only. Readers
 * (formats/) build checkpoints through the dck_ck_* builders below. */
#ifndef DCK_CORE_H
#define DCK_CORE_H

#include "common/common.h"

#include <stdio.h>

/* ------------------------------------------------------------------ checkpoint.c
 * What readers produce. A tensor is stored as one or more pieces; a piece is
 * a hyperrectangular slice [offset, offset+shape) of the global tensor whose
 * elements lie in one file, either contiguously in row-major order starting
 * at file_offset (strides == NULL), or at arbitrary element strides from
 * file_offset (PyTorch views). byteswap: stored big-endian. */
typedef struct {
    uint32_t file;                 /* index into ck->files */
    uint64_t file_offset;          /* byte offset in the decompressed file */
    uint64_t offset[DCK_MAX_DIMS]; /* slice start, elements */
    uint64_t shape[DCK_MAX_DIMS];  /* slice extent, elements */
    int64_t *strides;              /* element strides (malloc'd) or NULL */
    bool byteswap;
} dck_piece;

typedef struct {
    dck_tensor_info info;      /* info.name: in the checkpoint's arena; info.source: the
                                  path of the file of its first piece (ck->files[]) */
    dck_piece *pieces;         /* cap_pieces 0: one piece, in the checkpoint's arena;
                                  else a malloc'd array (builders only: dck_ck_add_piece) */
    size_t npieces, cap_pieces;
    /* Where the file put it: tensors are numbered as readers add them, and
     * dck_ck_validate's sort by name leaves the numbers. ordered: the reader
     * keeps the order the file lists its tensors in, and the file lists them
     * in the model's order (dck_ck_mark_ordered; a torch.save pickle, DCP's
     * metadata, an index's weight_map as written). */
    uint64_t seq;
    bool ordered;
} dck_tensor_entry;

struct dck_checkpoint {
    dck_file **files;
    size_t nfiles, cap_files;
    dck_tensor_entry *tensors;
    size_t ntensors, cap_tensors;
    dck_manifest_value *values; /* name/value strings owned */
    size_t nvalues, cap_values;
    uint32_t *value_files;      /* per value: the file it came from (UINT32_MAX: none), for messages */
    size_t cap_value_files;
    char *root;                 /* directory the relpaths are relative to */
    dck_options opt;
};

/* An empty checkpoint with a copy of opt (NULL: defaults). Readers that
 * build in steps (Megatron merging) load into a scratch one, validate it and
 * move its contents over. */
dck_status dck_ck_create(const dck_options *opt, dck_checkpoint **out);
/* Builders used by readers. add_file returns the file index; the checkpoint
 * takes ownership of f. add_piece finds or creates the tensor by name; when
 * it exists, dtype and global shape must agree (DCK_ERR_LAYOUT names both
 * files). For a duplicate unsharded tensor (two pieces each covering the
 * whole tensor) the overlap check in dck_checkpoint_validate reports it. */
dck_status dck_ck_add_file(dck_checkpoint *ck, dck_file *f, uint32_t *index);
dck_status dck_ck_add_piece(dck_checkpoint *ck, const char *name, dck_dtype dtype,
                            const uint64_t *global_shape, int ndim, const dck_piece *piece);
/* A hint that name is about to be added: its slot of the name index is
 * fetched into the cache meanwhile (a reader adding tensors in a loop calls
 * it some tensors ahead; the table of 100k names is megabytes, and a miss
 * per tensor was the largest cost of adding one). */
void dck_ck_prefetch_name(dck_checkpoint *ck, const char *name);
dck_status dck_ck_add_value(dck_checkpoint *ck, const char *name, const char *value);
/* Room for `more` new tensors without growing again (a reader that knows
 * how many it will add, such as a safetensors header: no copies of the
 * tensor array, one sizing of the name index). Optional. */
dck_status dck_ck_reserve(dck_checkpoint *ck, size_t more);
/* Readers whose files keep the model's order of their tensors: the tensors
 * added since ck->tensors[from] are in it (their seq numbers). */
void dck_ck_mark_ordered(dck_checkpoint *ck, size_t from);
/* Whether every tensor of ck came in a model order (dck_ck_mark_ordered); an
 * empty checkpoint keeps none. */
bool dck_ck_keeps_order(const dck_checkpoint *ck);
/* Checks every tensor's pieces: inside bounds, disjoint, covering it, and
 * that no value name repeats (the message names both files). Sorts
 * tensors in model order and fills info (group, nbytes, source). */
dck_status dck_ck_validate(dck_checkpoint *ck);
/* Drops the tensors i with drop[i] set (ntensors entries; unvalidated
 * checkpoint), keeping the others in their order; their files stay. For a
 * reader that turns stored tensors into others (pieces of the new ones may
 * point into the same bytes). */
void dck_ck_remove_tensors(dck_checkpoint *ck, const unsigned char *drop);
/* dck_ck_validate's check of tensor i's pieces alone (inside its shape and
 * its files, disjoint, covering it; fills info.nbytes), with the same
 * message: for a reader that reads a tensor's bytes before validation. */
dck_status dck_ck_check_tensor(dck_checkpoint *ck, size_t i);
/* Empties ck (files closed, tensors and values dropped); opt and root stay. */
void dck_ck_reset(dck_checkpoint *ck);
/* Moves everything src holds into dst (files, tensors, values), each name
 * as prefix + name (prefix NULL or ""; as it is), and frees src. Both
 * unvalidated or validated; dst is validated later as usual. */
dck_status dck_ck_move(dck_checkpoint *dst, dck_checkpoint *src, const char *prefix);
/* The group a file's role gives its tensors (detcheck-formats(7) "File
 * roles": optimizer.pt, rng_state_3.pth, model.safetensors...), by its base
 * name (a .zst suffix aside); -1 when the name has no role (the tensor name
 * rules decide). */
int dck_file_role_group(const char *path);
/* Storage shared between tensors (one storage written once, as torch.save
 * does for tied weights and views): out[i] = another tensor whose only
 * piece lies in the same file over bytes that overlap tensor i's, or -1
 * when none or when the reader cannot tell (tensors of several pieces).
 * out has ck->ntensors entries (validated checkpoint: model order).
 * O(n log n). */
dck_status dck_ck_storage_aliases(const dck_checkpoint *ck, long *out);
/* The manifest of a hashed checkpoint: tensor_digests in tensor order,
 * file_hashes (whole-file xxh128) in file order; tool and created metadata,
 * values; finalized. Every hashing path (CPU, GPU, distributed) uses it. */
/* The output rule's kind test for manifests (dck_output_check): path
 * sniffs and loads as a manifest. The error of the load is cleared. */
bool dck_manifest_is_file(const char *path);
/* dck_manifest_save for outputs of another kind of manifest (what, same_kind
 * as dck_output_check takes them): a seal (runs/seal.c) replaces only a seal. */
dck_status dck_manifest_save_kind(const dck_manifest *m, dck_format fmt, const char *path, const char *what,
                                  dck_output_kind same_kind);
dck_status dck_ck_build_manifest(dck_checkpoint *ck, const dck_digest *tensor_digests,
                                 const dck_digest *file_hashes, dck_manifest **out);


/* ------------------------------------------------------------------ manifest*.c
 * (the model, manifest_write.c, manifest_parse.c, manifest_compare.c)
 * Manifests are written directly (one buffer, no per-scalar library calls);
 * this writes one through libyaml / jansson instead, as every manifest was
 * written before: the direct writers must give the same bytes (tests and
 * tests/fuzz/fuzz_manifest.c compare them). */
dck_status dck_manifest_write_reference(const dck_manifest *m, dck_format fmt, FILE *out);
/* Names and value texts are UTF-8 (common/utf8.h, dck_utf8_valid, says why
 * and where others are refused). s for a message: printable ASCII and valid UTF-8 as they are, a quote or
 * backslash and every other byte as \xHH; cut to fit n with "...". */
const char *dck_text_escape(const char *s, char *buf, size_t n);
/* DCK_ERR_FORMAT "WHERE: WHAT 'S' is not valid UTF-8" unless s is UTF-8. */
dck_status dck_check_utf8(const char *where, const char *what, const char *s);
/* Nesting a manifest may have (the format needs 4: document, tensors,
 * entry, shape): deeper documents are refused before libyaml, whose
 * scanner is quadratic in the depth, or jansson read them. */
#define DCK_MANIFEST_MAX_DEPTH 8
/* Room for that many tensors and files (dck_ck_build_manifest). */
dck_status dck_manifest_reserve(dck_manifest *m, size_t ntensors, size_t nfiles);
/* A hint that the n bytes at p (a large array about to be filled) are
 * better served by transparent huge pages; no effect on small blocks or
 * where the system has none. (Here rather than in checkpoint.c, which uses
 * this file: the files of a layer form no cycle.) */
void dck_hugepage_hint(void *p, size_t n);

/* ------------------------------------------------------------------ piece geometry
 * A contiguous piece is a set of runs: q is the last dim where the slice is
 * narrower than the tensor; each run spans shape[q] * inner(q) elements of
 * one global "row" (the tensor viewed as [prod(dims < q), rest]). Shared by
 * logical reads (checkpoint.c) and the hashing engines (hash/). */
typedef struct {
    int q;              /* -1: the piece is the whole tensor */
    uint64_t run_bytes; /* bytes per run */
    uint64_t row_bytes; /* global bytes per row (dims >= q) */
    uint64_t col_byte;  /* byte offset of the run within its row */
    uint64_t nruns;
} dck_piece_geom;

void dck_piece_geom_of(const dck_tensor_entry *t, const dck_piece *p, dck_piece_geom *g);
/* Global byte offset of run r of a piece. */
uint64_t dck_piece_run_global(const dck_tensor_entry *t, const dck_piece *p, const dck_piece_geom *g,
                              uint64_t r);
/* If global row `row` holds a run of the piece, its run index (1), else 0. */
int dck_piece_run_of_row(const dck_tensor_entry *t, const dck_piece *p, const dck_piece_geom *g,
                         uint64_t row, uint64_t *run);
/* One past the last stored byte of a piece (DCK_ERR_* when it overflows). */
dck_status dck_piece_extent(const dck_tensor_entry *t, const dck_piece *p, uint64_t *end);
/* Gathers elements [e0, e0+n) (row-major within the piece, which for a
 * strided piece is the whole tensor) into buf, byte-swapped to
 * little-endian when stored big-endian. */
void dck_piece_gather(const dck_tensor_entry *t, const dck_piece *p, const uint8_t *base,
                      uint64_t e0, size_t n, uint8_t *buf);

/* ------------------------------------------------------------------ sharded layout
 * detcheck's sharded safetensors: __metadata__ holds
 *   "detcheck.layout": "sharded-v1"
 *   "detcheck.slice.<tensor name>": "{\"global_shape\":[...],\"offset\":[...]}"
 * for each stored tensor that is a slice of a larger global tensor. */
#define DCK_LAYOUT_KEY "detcheck.layout"
#define DCK_LAYOUT_VALUE "sharded-v1"
#define DCK_SLICE_PREFIX "detcheck.slice."

/* ------------------------------------------------------------------ layout state (manifest_compare.c)
 * See dck_cmp_set_aside_layout_state. How two sides' layouts differ:
 * SAME; CLAIMED, only in layout values as the writer claims them (Megatron's
 * args: one may lie); STORED, in what is stored (a per-rank object's grid
 * on one side only, a layout value the reader checks against its files). */
enum { DCK_LAYOUTS_SAME, DCK_LAYOUTS_CLAIMED, DCK_LAYOUTS_STORED };
/* The DCK_LAYOUTS_* a differing value of this name is evidence of: STORED,
 * CLAIMED, or SAME when the name describes no layout. */
int dck_layout_value_kind(const char *name);
/* Names of two sides (name_at(ctx, i) for i < n) and the first differing
 * layout value of each kind ("args.tensor_model_parallel_size: 1 vs 2", or
 * NULL): the DCK_LAYOUTS_* of the two sides, and why (the evidence; ""
 * when SAME). label_a/label_b name the sides ("the golden"). */
typedef const char *(*dck_name_at_fn)(const void *ctx, size_t i);
int dck_layouts_differ(const char *stored, const char *claimed, dck_name_at_fn name_at, const void *ca, size_t na,
                       const void *cb, size_t nb, const char *label_a, const char *label_b, char *why, size_t why_len);
/* 1 when the entry name (on one side only or not) is set aside under the
 * layouts' DCK_LAYOUTS_* differ (the table of manifest_compare.c): writer
 * bookkeeping on one side only always; layout values when the layouts
 * differ; location state on one side only then; per-rank state when what
 * is stored differs (when only the claims do: what has no grid, on one
 * side only). */
int dck_layout_set_aside(const char *name, bool one_side, int differ);

/* ------------------------------------------------------------------ hashing internals (digest.c) */
/* Hex helpers */
void dck_hex_encode(const uint8_t *in, size_t n, char *out);
/* Canonical 16 bytes of a digest: high64 BE, low64 BE. */
void dck_digest_canonical(dck_digest d, uint8_t out[16]);

#endif

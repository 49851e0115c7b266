/* formats/: one reader per checkpoint format. A reader is a dck_reader
 * (probe, open, optional option check); formats/open.c holds the only
 * table of them and the only sniffing of paths. */
#ifndef DCK_FORMATS_H
#define DCK_FORMATS_H

#include "core/core.h"

/* Readers: each fills ck from one path (a file or a directory). They are
 * tried by dck_checkpoint_open (open.c) in table order on content sniffing.
 * A reader defines one `const dck_reader dck_reader_NAME` and is listed in
 * open.c's table; nothing else names it. */
typedef struct {
    const char *name;
    /* Can this reader take this path? (1 yes, 0 no). head: first bytes of
     * the decompressed file (up to 64), or NULL for a directory. */
    int (*probe)(const char *path, bool is_dir, const uint8_t *head, size_t nhead);
    dck_status (*open)(dck_checkpoint *ck, const char *path, const char *relroot);
    /* Optional (NULL: none): checks the reader's own fields of dck_options
     * before any path is opened, so a bad option fails whatever the paths
     * hold. */
    dck_status (*check_options)(const dck_options *opt);
    /* Directory scans: 1 when this reader is tried on the files of a
     * directory (0 for readers of files that point at others, such as
     * index files, which would read the directory's shards twice). */
    int in_directories;
} dck_reader;


/* megatron.c: merging legacy Megatron-LM rank directories. The split dimension of a merged tensor name: opt's rules, then the
 * built-in ones; -1 replicated. *rule: the rule that decided ("GLOB=DIM"),
 * or NULL when none matched. */
dck_status dck_megatron_split_dim(const dck_options *opt, const char *name, int *dim,
                                  const char **rule);

/* safetensors_index.c: index files (*.index.json: a weight_map from tensor names
 * to shard files). dck_index_open reads index_path and calls open_shard
 * once per shard (path joined to dir, relpath to relprefix; name as the
 * index spells it), then checks that every tensor of the weight_map was
 * added. open.c opens the shards by content (any format). */
typedef dck_status (*dck_index_shard_fn)(void *ctx, dck_checkpoint *ck, const char *path,
                                         const char *relpath, const char *name);
dck_status dck_index_open(dck_checkpoint *ck, const char *index_path, const char *dir,
                          const char *relprefix, dck_index_shard_fn open_shard, void *ctx);

/* safetensors.c: parse one file's header into pieces. */
dck_status dck_safetensors_open_file(dck_checkpoint *ck, const char *path, const char *relpath);
/* Parses the header JSON (bytes after the 8-byte length) of a file of
 * data_size bytes; used by the reader and the fuzz target. */
dck_status dck_safetensors_parse_header(dck_checkpoint *ck, uint32_t file, const char *json,
                                        size_t json_len, uint64_t data_size, const char *label);

/* mcore_flat.c: Megatron-Core's additions to a torch_dist `.metadata`
 * (MCoreMetadata.mcore_data; see detcheck-formats(7), "Megatron-Core
 * optimizer state"). dck_mcore_create: *out NULL when root (the unpickled
 * Metadata) has no mcore_data and megatron is false; sdm: its
 * state_dict_metadata dict. megatron: the directory is Megatron-Core's
 * (its metadata.json names the torch_dist backend): from 0.16 on it pickles
 * torch's plain Metadata, without mcore_data, and the names still apply. */
struct pk_node;
typedef struct dck_mcore dck_mcore;
dck_status dck_mcore_create(const struct pk_node *root, const struct pk_node *sdm, const char *label,
                            bool megatron, dck_mcore **out);
void dck_mcore_free(dck_mcore *m);
/* The name a stored key is reported under: master weights get one name,
 * `optimizer.state.param.KEY` -> `optimizer.state.fp32_param.KEY` (unless
 * both are stored). Returns fqn or buf (n bytes). m NULL: fqn. */
const char *dck_mcore_name(const dck_mcore *m, const char *fqn, char *buf, size_t n);
/* A flattened-range tensor (nd_reformulated_orig_global_shape): true and
 * the parameter's shape (*nd dims). */
bool dck_mcore_flat_shape(const dck_mcore *m, const char *fqn, int *nd, const uint64_t **shape);
/* Rewrites the pieces of tensor name, loaded in its stored shape
 * [chunks per dim..., chunk numel], into pieces of the parameter's shape;
 * DCK_ERR_FORMAT naming label when the shapes do not fit together. */
dck_status dck_mcore_unflatten(dck_checkpoint *ck, const char *label, const char *name, int nd,
                               const uint64_t *oshape);
/* Pieces that grow (dck_grow); v malloc'd, n used, cap allocated. */
typedef struct {
    dck_piece *v;
    size_t n, cap;
} dck_piece_vec;
/* Elements [s, e) (row-major) of a chunk of shape b (nd >= 1 dims, inner[d]
 * = prod(b[d+1..])) whose first element is the tensor's element at base,
 * stored contiguously from byte fo (element size es): appends at most
 * 2nd-1 pieces, each a hyperrectangle contiguous in the file, copying
 * tmpl's file and byteswap. */
dck_status dck_mcore_split_range(dck_piece_vec *pv, const dck_piece *tmpl, int nd, const uint64_t *b,
                                 const uint64_t *inner, const uint64_t *base, uint64_t s, uint64_t e,
                                 uint64_t fo, size_t es);

/* mcore_buckets.c: the distributed optimizer's dp_reshardable state (one
 * 1-D buffer per bucket, `optimizer.distributed.dp_group_idx_G.gbuf_idx_B.
 * dtype_(P, G).bucket_idx_K.STATE`; see detcheck-formats(7)). Called once
 * the DCP directory's tensors are loaded (sdm: the .metadata's
 * state_dict_metadata, whose order is the model's parameter order; label:
 * the .metadata's path). When the parameter-to-bucket map is recovered and
 * checked (every master weight equals its model weight, every bucket
 * consumed exactly), the buckets become optimizer.state.{fp32_param,
 * exp_avg,...}.KEY in the parameter's shape, padding left out; otherwise
 * the buckets are dropped and each is recorded as a value saying it is not
 * compared and why (and opt.notice says so). Nothing to do: DCK_OK. */
dck_status dck_mcore_buckets(dck_checkpoint *ck, const struct pk_node *sdm, const char *label);

#endif

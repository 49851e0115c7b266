/* The two sides of a diff (diff_sides.c), as the engine (diff.c) sees
 * them: a checkpoint or a manifest, its tensors in name order, and how
 * their bytes are read. Private to diff/. */
#ifndef DCK_DIFF_SIDES_H
#define DCK_DIFF_SIDES_H

#include "formats/formats.h"

typedef struct {
    const char *name; /* borrowed from the checkpoint or manifest */
    dck_group group;
    dck_dtype dtype;
    int ndim;
    const uint64_t *shape;
    uint64_t nbytes;
    int has_digest;
    dck_digest digest;
    size_t index; /* in the checkpoint */
    const uint8_t *direct; /* its bytes in a file map (contiguous tensors), or NULL */
} side_tensor;

typedef struct {
    const char *label;    /* path, for messages */
    dck_checkpoint *ck;   /* exactly one of ck, m */
    const dck_manifest *m;
    side_tensor *t;
    size_t n;
    unsigned char *whole; /* per file: mapped and read through the map by
                             dck_checkpoint_read (pages let go per window) */
} side;


/* sd->t: the side's tensors that the options select (--groups, --exclude),
 * in name order. */
dck_status dck_diff_side_build(side *sd, const dck_diff_options *o);
/* Maps, before the workers start, the files the chunks read through a map;
 * then, per side, where each contiguous tensor lies in its map. */
dck_status dck_diff_premap(side *a, side *b, int threads);
dck_status dck_diff_side_set_direct(side *sd);
/* Whether any mapped file is read through dck_checkpoint_read. */
int dck_diff_side_reads_maps(const side *sd);
/* Pages of mapped files let go between windows; of a tensor read in place,
 * after each chunk. */
void dck_diff_side_release_maps(side *sd);
void dck_diff_release_direct(const side_tensor *st, uint64_t off, size_t len);
/* Bytes [off, off+len) of a tensor: in place, or read into buf. */
dck_status dck_diff_side_bytes(side *sd, const side_tensor *st, uint64_t off, size_t len, uint8_t *buf,
                               const uint8_t **out);
/* A file of the side that changed while it was read (sizes: its size too). */
dck_status dck_diff_side_changed(const side *sd, int sizes);
/* The values of the two sides that differ or are on one side only, into r. */
dck_status dck_diff_compare_values(const side *a, const side *b, const dck_diff_options *o, dck_diff_result *r);
/* r's tensors in the model's order where a side keeps it (r->order). */
dck_status dck_diff_model_order(dck_diff_result *r, const side *a, const side *b, const side_tensor *const *ta,
                                const side_tensor *const *tb);
/* A path opened as a manifest or a checkpoint; failures name the path. */
dck_status dck_diff_side_open(const char *path, const dck_options *open_opt, int threads, side *sd);
void dck_diff_side_close(side *sd);

#endif

/* The checkpoints of a run directory (step_NNNNNNNN/ as the trainer writes
 * them): checkpoints.c. */
#ifndef DCK_RUNS_CHECKPOINTS_H
#define DCK_RUNS_CHECKPOINTS_H

#include "core/core.h"

#define DCK_CKPT_MARKER "COMPLETE"
#define DCK_CKPT_MANIFEST "manifest.json"

/* "DIR/step_%08ld" (malloc'd). */
char *dck_ckpt_dir(const char *out, long step);
/* The manifest of run out's checkpoint at step (dck_manifest_load). */
dck_status dck_ckpt_manifest_load(const char *out, long step, dck_manifest **m);
/* Complete checkpoints of a run directory, ascending steps (malloc'd);
 * torn ones reported through warn (may be NULL). */
typedef void (*dck_warn_fn)(void *ctx, const char *msg);
dck_status dck_ckpt_list(const char *out, long **steps, size_t *n, dck_warn_fn warn, void *ctx);
/* Shard files of a step directory, sorted (malloc'd array of malloc'd). */
dck_status dck_ckpt_shards(const char *dir, char ***paths, size_t *n);
void dck_free_strings(char **v, size_t n);

#endif

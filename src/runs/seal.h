/* Sealed checkpoints (seal.c; the public calls are detcheck.h's dck_seal_*):
 * what else the CLI and `latest` share of them. man detcheck-seal(1). */
#ifndef DCK_RUNS_SEAL_H
#define DCK_RUNS_SEAL_H

#include "core/core.h"

/* The step checkpoint path ckpt's base name says (dck_latest_step of it;
 * a trailing '/' allowed): 1 and *step, or 0 when the name says none. */
int dck_seal_name_step(const char *ckpt, long long *step);

/* A seal copied from another checkpoint: its seal_step, when given, must be
 * the step ckpt's name says (when it says one). DCK_ERR_MISMATCH "seal of
 * step A, checkpoint's name says step B", DCK_ERR_FORMAT for a seal_step
 * that is no step. */
dck_status dck_seal_check_step(const char *ckpt, const char *seal_path, const dck_manifest *seal);

/* The output rule's kind test for seals (dck_output_check): path is a
 * regular file that loads as a seal. The error of the load is cleared. */
bool dck_seal_is_file(const char *path);

/* The output rule for seal_path, before any work and again by
 * dck_seal_save at the moment of writing: nothing there, or an earlier
 * seal; a link, a FIFO, a directory, an empty or any other file is refused
 * (DCK_ERR_INVALID, naming it). */
dck_status dck_seal_output_check(const char *seal_path);

#endif

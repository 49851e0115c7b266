/* The built-in trainer's state as its checkpoints see it. train_loop.c
 * describes its state in a dck_train_state (pointers into the trainer,
 * filled before each call); train_ckpt.c names the state tensors, digests
 * them and writes, verifies and loads checkpoints (man detcheck-train(1)). */
#ifndef DCK_TRAIN_STATE_H
#define DCK_TRAIN_STATE_H

#include "train/train.h"

#include <stdio.h>

typedef struct {
    dck_train_config *c; /* a resume sets decay_steps from the checkpoint unless given */
    char **config_json;  /* the run's identity JSON (dck_train_config_json), renewed with c */
    dck_comm *comm;
    int rank, K, T, M;   /* this rank, ranks, threads, microbatches per step */
    const dck_model *m;
    size_t lo, hi;       /* this rank's slice of the flat parameters (ZeRO-1) */
    float *master;       /* fp32 weights, all P */
    float *m1, *m2;      /* Adam's moments, [lo, hi) */
    uint16_t *bf16;      /* bf16 weights, [lo, hi), with --precision bf16 */
    FILE *traj;          /* the trajectory, flushed with each checkpoint; NULL none */
    const char *traj_path;
    void (*say)(void *ctx, int warning, const char *msg); /* notes; NULL none */
    void *ctx;
} dck_train_state;

/* Root digest over every model and optimizer tensor: each rank reduces its
 * slices to fragment partials, the partials travel as bytes, every rank
 * finishes the same digests (collective). */
dck_status dck_train_state_root(const dck_train_state *st, dck_digest *root);
/* The checkpoint of `step` under c->out: every rank's shard, then rank 0's
 * manifest and COMPLETE marker (collective). */
dck_status dck_train_ckpt_save(const dck_train_state *st, long step, float lr);
/* Finds, verifies and loads the checkpoint to resume from (c->resume_from,
 * else the last complete one of c->out, skipping damaged ones with a note);
 * *step = 0 when none. */
dck_status dck_train_ckpt_resume(const dck_train_state *st, long *step);
/* mkdir -p. */
dck_status dck_train_mkdir_p(const char *path);

#endif

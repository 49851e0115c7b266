/* Which GPU a process uses (detcheck-gpu(7), DEVICE): one rule for detcheck train, hash
 * --distributed and canary, so that the three put the ranks of a node on the
 * same devices. */
#ifndef DCK_GPU_CHOICE_H
#define DCK_GPU_CHOICE_H

#include "detcheck.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int index;        /* among the visible devices: what cudaSetDevice takes */
    int local;        /* the node-local rank the launcher gave; -1: none */
    const char *from; /* the variable the rank came from; "rank" for the caller's */
    char visible[64]; /* the CUDA_VISIBLE_DEVICES entry of index; "" when unset */
} dck_gpu_choice;

/* The node-local rank the launcher set in the environment (-1: none), and
 * the variable it came from (*from may be NULL). */
int dck_gpu_local_rank(const char **from);

/* The device of this process among ndevices visible ones (the runtime's
 * count, which CUDA_VISIBLE_DEVICES already narrowed): the node-local rank
 * modulo ndevices; without one (an unknown launcher), the job rank the
 * launcher set, else `rank` (the caller's), modulo ndevices. So a node with
 * more ranks than GPUs shares them round-robin instead of failing, and
 * srun --gpus-per-task=1 (one visible) gives index 0. DCK_ERR_NODEVICE,
 * saying why, when ndevices < 1. */
dck_status dck_gpu_choose(int rank, int ndevices, dck_gpu_choice *out);

#ifdef __cplusplus
}
#endif
#endif

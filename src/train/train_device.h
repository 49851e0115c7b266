/* The trainer on a device (detcheck-gpu(7), TRAINING): what train_loop.c needs from the GPU
 * path (src/gpu/gpu_train.c) and the step constants shared by the CPU and
 * the GPU optimizer. */
#ifndef DCK_TRAIN_DEVICE_H
#define DCK_TRAIN_DEVICE_H

#include "train/train.h"
#include "gpu/gpu_train.h"
#include "gpu/gpu_train_math.h"

/* AdamW's constants of one step (bias corrections in double, rounded once),
 * the same for the CPU loop (dck_adamw) and the GPU kernel. */
dck_tm_adamw dck_adamw_consts(const dck_train_config *c, long step, float lr, float gscale);

/* The device a run's step runs on (--device): NULL *out for the CPU. cpu
 * (or ""): the CPU; cuda: the GPU of this rank (rank % visible devices),
 * DCK_ERR_NODEVICE saying why when there is none; auto: the GPU when there is
 * one, else the CPU, *note saying so; twin: the GPU path run by the kernels'
 * CPU twin (tests). nbufs: the rank's microbatches; [lo, hi): its ZeRO-1
 * slice. */
dck_status dck_train_device_open(const dck_model *m, int rank, int nbufs, size_t lo, size_t hi,
                                 struct dck_gt **out, char *note, size_t note_len);

#endif

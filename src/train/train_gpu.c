/* The trainer's device (detcheck-gpu(7), TRAINING): picks the backend of --device and
 * describes the model to the GPU path (src/gpu/gpu_train.c) as offsets. */
#include "train/train_device.h"
#include "gpu/gpu_choice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert((int)BP_COUNT == (int)DCK_GT_BLOCK_ITEMS && (int)BP_LN1_W == (int)DCK_GT_LN1_W &&
                   (int)BP_QKV_W == (int)DCK_GT_QKV_W && (int)BP_PROJ_B == (int)DCK_GT_PROJ_B &&
                   (int)BP_LN2_W == (int)DCK_GT_LN2_W && (int)BP_FC_W == (int)DCK_GT_FC_W &&
                   (int)BP_FC2_B == (int)DCK_GT_FC2_B,
               "the block items are in the same order on both sides");

dck_status dck_train_device_open(const dck_model *m, int rank, int nbufs, size_t lo, size_t hi,
                                 dck_gt **out, char *note, size_t note_len) {
    const dck_train_config *c = &m->cfg;
    *out = NULL;
    if (note_len) note[0] = 0;
    const char *dev = c->device;
    if (!dev[0] || !strcmp(dev, "cpu")) return DCK_OK;
    dck_tk_backend be;
    if (!strcmp(dev, "twin")) {
        DCK_TRY(dck_tk_twin_backend(&be));
    } else {
        int n = 0;
        dck_gpu_choice ch; /* the rule hash and canary use too (gpu_choice.h) */
        dck_status s = dck_gpu_device_count(&n);
        if (!s) s = dck_gpu_choose(rank, n, &ch);
        if (!s) s = dck_tk_cuda_backend(ch.index, &be);
        if (s) {
            if (strcmp(dev, "auto")) return s;
            snprintf(note, note_len, "--device auto: training on the CPU (%s)", dck_last_error());
            return DCK_OK;
        }
    }
    size_t L = (size_t)c->layers, nt = m->nparams;
    size_t *ob = dck_xcalloc(L * BP_COUNT + 1, sizeof *ob);
    size_t *toff = dck_xcalloc(nt + 1, sizeof *toff), *tnum = dck_xcalloc(nt + 1, sizeof *tnum);
    bool *tdec = dck_xcalloc(nt + 1, sizeof *tdec);
    dck_status s = DCK_OK;
    if (!ob || !toff || !tnum || !tdec) {
        s = dck_oom("train");
        if (be.destroy) be.destroy(be.ctx);
    } else {
        for (size_t l = 0; l < L; l++)
            for (size_t j = 0; j < BP_COUNT; j++)
                ob[l * BP_COUNT + j] = m->params[m->i_block0 + l * BP_COUNT + j].offset;
        for (size_t t = 0; t < nt; t++) {
            toff[t] = m->params[t].offset;
            tnum[t] = m->params[t].numel;
            tdec[t] = m->params[t].decay;
        }
        dck_gt_model gm = {
            .vocab = (uint32_t)c->vocab, .layers = (uint32_t)c->layers,
            .width = (uint32_t)c->width, .heads = (uint32_t)c->heads, .seq = (uint32_t)c->seq,
            .batch = (uint32_t)c->batch, .bf16 = c->precision == DCK_PREC_BF16,
            .fast = c->mode == DCK_MODE_FAST, .total = m->total,
            .off_wte = m->params[m->i_wte].offset, .off_wpe = m->params[m->i_wpe].offset,
            .off_lnf_w = m->params[m->i_lnf_w].offset, .off_lnf_b = m->params[m->i_lnf_b].offset,
            .off_head = m->params[m->i_head].offset, .off_block = ob, .ntensors = nt,
            .t_offset = toff, .t_numel = tnum, .t_decay = tdec,
        };
        s = dck_gt_create(&gm, &be, nbufs, lo, hi, out); /* owns be from here */
    }
    free(ob);
    free(toff);
    free(tnum);
    free(tdec);
    return s;
}

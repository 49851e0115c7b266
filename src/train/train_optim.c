/* AdamW, LR schedule, the fixed gradient tree and ZeRO-1 ownership. */
#include "train/train.h"
#include "train/train_vec.h"
#include "train/train_device.h"

#include <math.h>
#include <string.h>

/* Linear warmup over `warmup` steps, then cosine from lr to min_lr at
 * decay_steps (held at min_lr after). Computed in double with the project's
 * own cosine, rounded once to float. */
float dck_lr_at(const dck_train_config *c, long step) {
    double base = c->lr, lo = c->min_lr;
    long decay = c->decay_steps > 0 ? c->decay_steps : c->steps;
    if (c->warmup > 0 && step <= c->warmup) return (float)(base * (double)step / (double)c->warmup);
    if (decay <= c->warmup) return (float)lo;
    double p = (double)(step - c->warmup) / (double)(decay - c->warmup);
    if (p > 1.0) p = 1.0;
    return (float)(lo + 0.5 * (base - lo) * (1.0 + dck_cospi(p)));
}

dck_tm_adamw dck_adamw_consts(const dck_train_config *c, long step, float lr, float gscale) {
    dck_tm_adamw a;
    a.b1 = c->beta1;
    a.b2 = c->beta2;
    a.one_b1 = 1.0f - a.b1;
    a.one_b2 = 1.0f - a.b2;
    a.bc1 = (float)(1.0 - dck_powi((double)a.b1, step));
    a.bc2 = (float)(1.0 - dck_powi((double)a.b2, step));
    a.eps = c->eps;
    a.lr = lr;
    a.decay = lr * c->weight_decay;
    a.gscale = gscale;
    return a;
}

void dck_adamw(const dck_model *m, const dck_train_config *c, long step, float lr, float gscale,
               const float *grad, float *master, float *exp_avg, float *exp_avg_sq, size_t lo,
               size_t hi) {
    dck_tm_adamw k = dck_adamw_consts(c, step, lr, gscale);
    const dck_tm_adamw *ak = &k;
    for (size_t t = 0; t < m->nparams; t++) {
        const dck_param *p = &m->params[t];
        size_t a = p->offset > lo ? p->offset : lo;
        size_t b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        /* DCK_VF elements at a time, each with dck_tm_adamw_update's operations
         * (sqrtf lane by lane: vector extensions have no square root) */
        size_t i = a;
        for (; i + DCK_VF <= b; i += DCK_VF) {
            dck_vf g = dck_vload(grad + i) * k.gscale;
            dck_vf mo = DCK_TM_ADAM_M(ak, dck_vload(exp_avg + (i - lo)), g);
            dck_vf v = DCK_TM_ADAM_V(ak, dck_vload(exp_avg_sq + (i - lo)), g);
            dck_vstore(exp_avg + (i - lo), mo);
            dck_vstore(exp_avg_sq + (i - lo), v);
            dck_vf mhat = mo / k.bc1;
            dck_vf vhat = v / k.bc2;
            dck_vf root = vhat;
            for (int l = 0; l < DCK_VF; l++) root[l] = sqrtf(vhat[l]);
            dck_vf upd = mhat / (root + k.eps);
            dck_vf w = dck_vload(master + i);
            if (p->decay) w = w - k.decay * w;
            dck_vstore(master + i, w - k.lr * upd);
        }
        for (; i < b; i++)
            master[i] = dck_tm_adamw_update(ak, p->decay, grad[i], &exp_avg[i - lo],
                                            &exp_avg_sq[i - lo], master[i]);
    }
}

void dck_tree_sum(float **bufs, size_t n, size_t len) {
    for (size_t stride = 1; stride < n; stride *= 2)
        for (size_t j = 0; j + stride < n; j += 2 * stride) {
            float *a = bufs[j];
            const float *b = bufs[j + stride];
            size_t i = 0;
            for (; i + DCK_VF <= len; i += DCK_VF) dck_vstore(a + i, dck_vload(a + i) + dck_vload(b + i));
            for (; i < len; i++) a[i] = a[i] + b[i];
        }
}

void dck_zero_partition(const dck_model *m, int size, size_t *start) {
    /* Cut at the first row boundary at or after r * P / size. */
    start[0] = 0;
    for (int r = 1; r < size; r++) {
        size_t target = (size_t)((unsigned __int128)m->total * (unsigned)r / (unsigned)size);
        size_t cut = m->total;
        for (size_t t = 0; t < m->nparams; t++) {
            const dck_param *p = &m->params[t];
            if (p->offset + p->numel <= target) continue;
            if (p->offset >= target) {
                cut = p->offset;
            } else {
                size_t rows = (target - p->offset + p->row - 1) / p->row;
                cut = p->offset + rows * p->row;
            }
            break;
        }
        if (cut < start[r - 1]) cut = start[r - 1];
        start[r] = cut;
    }
    start[size] = m->total;
}

/* Taps on the trainer's state (train.h, train_inject.c section): the
 * trainer calls these at fixed points of a step, and detcheck canary
 * (canary.c) records per-tensor digests there and flips one bit to show that
 * a fault is caught. Kept out of train_loop.c and train_model.c so that the
 * loop carries one line per point, and nothing at all runs when no tap is
 * set. */
#include "train/train.h"

void dck_train_tap_state(const dck_train_hooks *h, const dck_model *m, long step, dck_tap_point what,
                         float *a, float *b, size_t lo, size_t hi) {
    if (!h || !h->tap || !h->tap->on_state) return;
    /* the weights open a step: the activation tap (worker threads, started
     * after this call) reads the step from here */
    if (what == DCK_TAP_WEIGHTS) h->tap->step = step;
    h->tap->on_state(h->tap->ctx, m, what, step, a, lo, hi);
    if (b) h->tap->on_state(h->tap->ctx, m, (dck_tap_point)(what + 1), step, b, lo, hi);
}

void dck_train_tap_activations(const dck_model *m, float *act, size_t n) {
    dck_train_tap *t = m->tap;
    if (!t || !t->on_state) return;
    t->on_state(t->ctx, m, DCK_TAP_ACTIVATIONS, t->step, act, 0, n);
}

/* The training loop: data parallel over MPI ranks, microbatches over
 * threads, ZeRO-1 sharded AdamW, checkpoints and the trajectory log.
 *
 * Deterministic mode. Rank r computes the gradients of its contiguous,
 * aligned range of the M microbatches (one thread per microbatch, each into
 * its own buffer), sums them pairwise up its subtree of the fixed binary tree
 * over the global microbatch index, exchanges the subtree sums as bytes
 * (MPI_Allgather) and finishes the tree exactly as every other rank does. The
 * sums therefore have the same bits for any K and any thread count. Rank r
 * then updates only its slice of the flat parameters (ZeRO-1) and the
 * slices are all-gathered, again as bytes.
 *
 * Fast mode does what frameworks usually do, on purpose: thread partial sums
 * added in completion order and MPI_Allreduce(MPI_SUM) on floats. */
#include "train/train.h"
#include "train/train_device.h"
#include "train/train_state.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    dck_train_config c;
    dck_comm *comm;
    const dck_train_hooks *hooks;
    int rank, K, T, M, nloc;
    size_t mb_lo; /* first global microbatch of this rank */
    dck_model m;
    size_t P, lo, hi;
    size_t *part;
    float *master, *wparams, *m1, *m2;
    uint16_t *bf16; /* bf16 parameters, this rank's slice (indexed from lo) */
    float **gbufs;  /* nloc microbatch gradients (deterministic) */
    float *gather;  /* K * P subtree sums */
    float *acc;     /* fast mode sum */
    float **scratch;
    float *losses, *all_losses;
    dck_workspace **ws;
    uint16_t **tok;
    dck_data *data;
    pthread_mutex_t lock;
    float fast_loss;
    int fast_count;
    long cur_step;
    FILE *traj;
    char *config_json;
    char *traj_path;
    int lock_fd; /* RUN/.lock, held (flock) for the run's whole life; -1 none */
    /* records found after the resume step, re-checked as they are recomputed */
    dck_traj_rec *recorded;
    size_t nrecorded, rec_next;
    char *rec_tail; /* their lines as found (kept on a difference) */
    size_t rec_tail_len;
    long recheck_step;
    char recheck_what[640];
    /* --device cuda/twin: the step runs there (train_gpu.c); the host keeps
     * master, m1, m2 for digests and checkpoints, brought back when needed */
    dck_gt *dev;
    float *dev_host; /* P floats: gradients on their way between ranks or to a tap */
    bool nccl;       /* gradients between the ranks' GPUs by NCCL, not through the host */
} trainer;

static void say(trainer *tr, int warning, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(trainer *tr, int warning, const char *fmt, ...) {
    if (tr->rank != 0 || !tr->hooks || !tr->hooks->on_message) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tr->hooks->on_message(tr->hooks->ctx, warning, msg);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static bool is_bf16(const trainer *tr) { return tr->c.precision == DCK_PREC_BF16; }

static void say_cb(void *ctx, int warning, const char *msg) { say(ctx, warning, "%s", msg); }

/* The state as the checkpoint code sees it (train_state.h). */
static dck_train_state state_of(trainer *tr) {
    return (dck_train_state){.c = &tr->c, .config_json = &tr->config_json, .comm = tr->comm,
                             .rank = tr->rank, .K = tr->K, .T = tr->T, .M = tr->M, .m = &tr->m,
                             .lo = tr->lo, .hi = tr->hi, .master = tr->master, .m1 = tr->m1,
                             .m2 = tr->m2, .bf16 = tr->bf16, .traj = tr->traj,
                             .traj_path = tr->traj_path, .say = say_cb, .ctx = tr};
}


/* ------------------------------------------------------------------ trajectory */

/* Keeps the records up to the resumed step (a torn last line goes) and
 * rewrites the file with them; the records after it are kept in memory and
 * re-checked, step by step, against the ones this run recomputes
 * (traj_recheck): an edit there, or a run that does not reproduce its own
 * record, never passes unnoticed. */
static dck_status traj_open(trainer *tr, long resumed) {
    if (tr->rank != 0 || !tr->c.out[0]) return DCK_OK;
    tr->traj_path = dck_path_join(tr->c.out, DCK_TRAJECTORY);
    if (!tr->traj_path) return dck_oom(NULL);
    char *keep = NULL, *tail = NULL;
    size_t klen = 0, tlen = 0;
    FILE *old = resumed > 0 ? fopen(tr->traj_path, "rb") : NULL;
    if (resumed > 0 && !old && errno != ENOENT)
        return dck_set_error(DCK_ERR_IO, "%s: %s", tr->traj_path, strerror(errno));
    dck_status s = DCK_OK;
    if (old) {
        FILE *mem = open_memstream(&keep, &klen);
        FILE *tmem = mem ? open_memstream(&tail, &tlen) : NULL;
        if (!mem || !tmem) {
            if (mem) fclose(mem);
            free(keep);
            fclose(old);
            return dck_oom("train");
        }
        size_t cap = 0, rcap = 0;
        char *line = NULL;
        ssize_t len;
        long lineno = 0;
        while (!s && (len = getline(&line, &cap, old)) > 0) {
            lineno++;
            if (line[len - 1] != '\n') break;
            json_t *o = json_loadb(line, (size_t)len, 0, NULL);
            json_t *st = o ? json_object_get(o, "step") : NULL;
            bool before = json_is_integer(st) && json_integer_value(st) <= resumed;
            json_decref(o);
            if (before) {
                fwrite(line, 1, (size_t)len, mem);
                continue;
            }
            /* after the resume step (or no step at all): a record to re-check,
             * in step order; a line that is none is damage, not to be dropped */
            dck_traj_rec r;
            if ((s = dck_traj_parse_line(line, (size_t)len, tr->traj_path, lineno, &r))) break;
            if (tr->nrecorded && r.step <= tr->recorded[tr->nrecorded - 1].step) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s:%ld: step %ld does not follow step %ld",
                                  tr->traj_path, lineno, r.step, tr->recorded[tr->nrecorded - 1].step);
                break;
            }
            if ((s = dck_grow((void **)&tr->recorded, &rcap, tr->nrecorded + 1, sizeof *tr->recorded)))
                break;
            tr->recorded[tr->nrecorded++] = r;
            fwrite(line, 1, (size_t)len, tmem);
        }
        free(line);
        /* a record lost here would be lost for good: the file is rewritten */
        bool unread = ferror(old) != 0;
        fclose(old);
        bool nomem = fclose(mem) != 0;
        nomem |= fclose(tmem) != 0;
        tr->rec_tail = tail;
        tr->rec_tail_len = tlen;
        if (!s && (nomem || unread)) {
            s = unread ? dck_set_error(DCK_ERR_IO, "%s: cannot read the trajectory", tr->traj_path)
                       : dck_oom("train");
        }
        if (s) {
            free(keep);
            return s;
        }
    }
    s = dck_write_file_atomic(tr->traj_path, keep ? keep : "", keep ? klen : 0);
    free(keep);
    if (s) return s;
    tr->traj = fopen(tr->traj_path, "ab");
    if (!tr->traj)
        return dck_set_error(DCK_ERR_IO, "%s: %s", tr->traj_path, strerror(errno));
    return DCK_OK;
}

/* The record of step si, as this run writes it. */
static dck_traj_rec traj_rec_of(const dck_train_step_info *si) {
    return (dck_traj_rec){.step = si->step, .loss_bits = dck_f32_bits(si->loss),
                          .grad_norm_bits = dck_f32_bits(si->grad_norm), .lr_bits = dck_f32_bits(si->lr),
                          .has_root = si->has_root, .root = si->root};
}

/* Compares the record of si with the one found for its step on resume. The
 * first difference is reported as a warning, and the lines found after the
 * resume step are kept in TRAJECTORY.before-resume (the file itself now holds
 * what this run computed); the run goes on, and the command exits 1. */
static dck_status traj_recheck(trainer *tr, const dck_train_step_info *si) {
    if (tr->rec_next >= tr->nrecorded || tr->recheck_step) return DCK_OK;
    const dck_traj_rec *want = &tr->recorded[tr->rec_next];
    char what[512] = "";
    if (want->step > si->step) {
        snprintf(what, sizeof what, "no record of step %ld (the records found jump to step %ld)",
                 si->step, want->step);
    } else {
        tr->rec_next++;
        /* the lr as a reader of the file gets it */
        dck_traj_rec written = traj_rec_of(si), got = dck_traj_as_read(&written);
        long step;
        char d[480];
        if (!dck_traj_compare(want, 1, &got, 1, &step, d, sizeof d)) return DCK_OK;
        snprintf(what, sizeof what, "recorded vs recomputed: %s", d);
    }
    tr->recheck_step = si->step;
    snprintf(tr->recheck_what, sizeof tr->recheck_what, "%s: step %ld: %s", tr->traj_path, si->step,
             what);
    char *keep = dck_path_join(tr->c.out, DCK_TRAJECTORY ".before-resume");
    if (!keep) return dck_oom(NULL);
    dck_status s = dck_write_file_atomic(keep, tr->rec_tail, tr->rec_tail_len);
    say(tr, 1, "%s: this run does not reproduce the trajectory it resumed (the lines found after "
        "the resume step are kept in %s)", tr->recheck_what, keep);
    free(keep);
    return s;
}

static dck_status traj_write(trainer *tr, const dck_train_step_info *si) {
    if (!tr->traj) return DCK_OK;
    DCK_TRY(traj_recheck(tr, si));
    dck_traj_rec r = traj_rec_of(si);
    return dck_traj_append(tr->traj, tr->traj_path, &r);
}

/* ------------------------------------------------------------------ non-finite values
 * The rule (detcheck-train(1), NON-FINITE VALUES): a run stops, exit status 2, at the
 * first step whose loss, gradient elements or updated weights are not
 * finite, before that step's record, root or checkpoint.
 * The bits of a NaN are not portable (a GPU makes 0x7fffffff, x86
 * 0xffc00000, and payloads go through differently), but whether and where a
 * value is NaN is the same on every device: so the run stops at the same
 * step with the same message everywhere, and everything it wrote is the same
 * bits. Canonicalising NaNs instead would have to follow every operation of
 * the CPU and GPU paths (vector lanes, reductions, exp, log); a trajectory
 * full of NaNs is of no use anyway. A NaN moment of AdamW makes its weight
 * NaN, so the weights cover the optimizer state; an infinite moment (the
 * square of a huge gradient) has no payload and only zeroes its update. */
static const char *nonfinite_word(float v) { return v != v ? "NaN" : v > 0 ? "+inf" : "-inf"; }

static size_t first_nonfinite(const float *x, size_t a, size_t b) {
    for (size_t i = a; i < b; i++)
        if (!dck_tm_finite(x[i])) return i;
    return SIZE_MAX;
}

/* The parameter that holds flat index i (the last one with offset <= i). */
static const dck_param *param_at(const trainer *tr, size_t i) {
    const dck_param *p = &tr->m.params[0];
    for (size_t t = 1; t < tr->m.nparams && tr->m.params[t].offset <= i; t++) p = &tr->m.params[t];
    return p;
}

#define NONFINITE_RULE "the run stops at its first non-finite loss, gradient or weight"

/* Fast mode sums with floating-point collectives, which may not give every
 * rank the same bits: the ranks agree to stop together. A run with a fault
 * injected on purpose (canary --inject) goes on: its first difference is
 * the fault, before any value it makes non-finite. */
static bool faulty(const trainer *tr) { return tr->hooks && tr->hooks->tap && tr->hooks->tap->faults; }

static dck_status stop_agree(trainer *tr, dck_status s) {
    if (faulty(tr)) return DCK_OK;
    return tr->K > 1 && tr->c.mode != DCK_MODE_DET ? dck_comm_agree(tr->comm, s) : s;
}

static dck_status check_loss(trainer *tr, long step, float loss) {
    dck_status s = DCK_OK;
    if (!dck_tm_finite(loss))
        s = dck_set_error(DCK_ERR_LIMIT, "step %ld: the loss is %s; " NONFINITE_RULE, step,
                          nonfinite_word(loss));
    return stop_agree(tr, s);
}

/* grad: the step's (scaled) gradient on the host, P floats, read only when
 * the norm is not finite. A norm that overflows to +inf while every element
 * is finite (a huge gradient, a bit flipped by detcheck canary) is no stop:
 * +inf has no payload, and clipping then scales the update to zero. */
static dck_status check_gradient(trainer *tr, long step, float norm, const float *grad) {
    dck_status s = DCK_OK;
    size_t i = dck_tm_finite(norm) ? SIZE_MAX : first_nonfinite(grad, 0, tr->P);
    if (i != SIZE_MAX) {
        const dck_param *p = param_at(tr, i);
        s = dck_set_error(DCK_ERR_LIMIT,
                          "step %ld: the gradient of %s is %s at element %zu; " NONFINITE_RULE,
                          step, p->name, nonfinite_word(grad[i]), i - p->offset);
    }
    return stop_agree(tr, s);
}

/* first: this rank's first non-finite weight after the update (SIZE_MAX:
 * none); the ranks' slices are in index order, so the smallest is the
 * run's first, the same on every rank. */
static dck_status check_weights(trainer *tr, long step, size_t first) {
    if (tr->K > 1) {
        uint64_t mine = first, all[DCK_TRAIN_MAX_RANKS];
        DCK_TRY(dck_comm_allgather(tr->comm, &mine, all, sizeof mine));
        for (int r = 0; r < tr->K; r++)
            if (all[r] < mine) mine = all[r];
        first = mine == UINT64_MAX ? SIZE_MAX : (size_t)mine;
    }
    if (first == SIZE_MAX || faulty(tr)) return DCK_OK;
    const dck_param *p = param_at(tr, first);
    return dck_set_error(DCK_ERR_LIMIT,
                         "step %ld: the AdamW update made %s not finite at element %zu; "
                         NONFINITE_RULE,
                         step, p->name, first - p->offset);
}

/* ------------------------------------------------------------------ one step */

/* What a step reports (both step paths): its figures, and the state's root
 * on the steps --digest-every asks for and the last. */
static dck_status step_info(trainer *tr, long step, float loss, float norm, float lr,
                            dck_train_step_info *si) {
    si->step = step;
    si->loss = loss;
    si->grad_norm = norm;
    si->lr = lr;
    si->has_root = false;
    if (tr->c.digest_every > 0 && (step % tr->c.digest_every == 0 || step == tr->c.steps)) {
        dck_train_state st = state_of(tr);
        DCK_TRY(dck_train_state_root(&st, &si->root));
        si->has_root = true;
    }
    return DCK_OK;
}

static void microbatch_task(void *ctx, size_t i, int worker) {
    trainer *tr = ctx;
    size_t B = (size_t)tr->c.batch, S1 = (size_t)tr->c.seq + 1;
    size_t j = tr->mb_lo + i;
    uint16_t *tok = tr->tok[worker];
    for (size_t b = 0; b < B; b++) {
        uint64_t g = ((uint64_t)(tr->cur_step - 1) * (uint64_t)tr->M + j) * B + b;
        dck_data_sample(tr->data, g, tok + b * S1);
    }
    if (tr->c.mode == DCK_MODE_DET) {
        tr->losses[i] = dck_model_microbatch(&tr->m, tr->ws[worker], tr->wparams, tok, tr->gbufs[i]);
        return;
    }
    float *g = tr->scratch[worker];
    float loss = dck_model_microbatch(&tr->m, tr->ws[worker], tr->wparams, tok, g);
    pthread_mutex_lock(&tr->lock); /* completion order: deliberately not fixed */
    if (tr->fast_count++ == 0)
        memcpy(tr->acc, g, tr->P * sizeof(float));
    else
        for (size_t k = 0; k < tr->P; k++) tr->acc[k] += g[k];
    tr->fast_loss += loss;
    pthread_mutex_unlock(&tr->lock);
}

static dck_status step_once_dev(trainer *tr, long step, dck_train_step_info *si);

static dck_status step_once(trainer *tr, long step, dck_train_step_info *si) {
    if (tr->dev) return step_once_dev(tr, step, si);
    dck_status s = DCK_OK;
    size_t P = tr->P;
    float inv_m = 1.0f / (float)tr->M;
    float lr = dck_lr_at(&tr->c, step);
    tr->cur_step = step;
    dck_train_tap_state(tr->hooks, &tr->m, step, DCK_TAP_WEIGHTS, tr->master, NULL, 0, P);
    if (is_bf16(tr) && tr->hooks && tr->hooks->tap) /* what the tap left, as on the device path */
        for (size_t i = 0; i < P; i++) tr->wparams[i] = dck_bf16_round(tr->master[i]);
    tr->fast_count = 0;
    tr->fast_loss = 0.0f;
    dck_parallel_for(tr->T, (size_t)tr->nloc, microbatch_task, tr);
    float *grad, loss;
    if (tr->c.mode == DCK_MODE_DET) {
        dck_tree_sum(tr->gbufs, (size_t)tr->nloc, P);
        if (tr->K == 1) {
            grad = tr->gbufs[0];
            memcpy(tr->all_losses, tr->losses, (size_t)tr->nloc * sizeof(float));
        } else {
            if ((s = dck_comm_allgather(tr->comm, tr->gbufs[0], tr->gather, P * sizeof(float))))
                return s;
            if ((s = dck_comm_allgather(tr->comm, tr->losses, tr->all_losses,
                                        (size_t)tr->nloc * sizeof(float))))
                return s;
            float *sub[DCK_TRAIN_MAX_RANKS]; /* K <= the limit: dck_train_config_ranks */
            for (int r = 0; r < tr->K; r++) sub[r] = tr->gather + (size_t)r * P;
            dck_tree_sum(sub, (size_t)tr->K, P);
            grad = tr->gather;
        }
        float *lp[DCK_TRAIN_MAX_MICROBATCHES]; /* M: the option table's range */
        for (int j = 0; j < tr->M; j++) lp[j] = &tr->all_losses[j];
        dck_tree_sum(lp, (size_t)tr->M, 1);
        loss = tr->all_losses[0] * inv_m;
    } else {
        if ((s = dck_comm_allreduce_sum_f32(tr->comm, tr->acc, P))) return s;
        if ((s = dck_comm_allreduce_sum_f32(tr->comm, &tr->fast_loss, 1))) return s;
        grad = tr->acc;
        loss = tr->fast_loss * inv_m;
    }
    DCK_TRY(check_loss(tr, step, loss));
    for (size_t i = 0; i < P; i++) grad[i] = grad[i] * inv_m;
    dck_train_tap_state(tr->hooks, &tr->m, step, DCK_TAP_GRADIENTS, grad, NULL, 0, P);
    float norm = sqrtf(dck_sumsq(grad, P));
    DCK_TRY(check_gradient(tr, step, norm, grad));
    float gscale = (tr->c.clip > 0.0f && norm > tr->c.clip) ? tr->c.clip / (norm + 1e-6f) : 1.0f;
    dck_adamw(&tr->m, &tr->c, step, lr, gscale, grad, tr->master, tr->m1, tr->m2, tr->lo, tr->hi);
    DCK_TRY(check_weights(tr, step, first_nonfinite(tr->master, tr->lo, tr->hi)));
    dck_train_tap_state(tr->hooks, &tr->m, step, DCK_TAP_EXP_AVG, tr->m1, tr->m2, tr->lo, tr->hi);
    if (tr->K > 1) {
        size_t counts[DCK_TRAIN_MAX_RANKS], displs[DCK_TRAIN_MAX_RANKS];
        for (int r = 0; r < tr->K; r++) {
            counts[r] = (tr->part[r + 1] - tr->part[r]) * sizeof(float);
            displs[r] = tr->part[r] * sizeof(float);
        }
        if ((s = dck_comm_allgatherv(tr->comm, tr->master + tr->lo, (tr->hi - tr->lo) * sizeof(float),
                                     tr->master, counts, displs)))
            return s;
    }
    if (step == tr->c.flip_step) {
        /* testing hook: one flipped bit, as a faulty node would produce */
        long t = dck_model_find(&tr->m, tr->c.flip_tensor);
        float *w = tr->master + tr->m.params[t].offset + tr->c.flip_index;
        *w = dck_f32_from_bits(dck_f32_bits(*w) ^ 1u);
    }
    if (is_bf16(tr))
        for (size_t i = 0; i < P; i++) tr->wparams[i] = dck_bf16_round(tr->master[i]);
    return step_info(tr, step, loss, norm, lr, si);
}

/* The same step with the model and the optimizer on a device (--device;
 * src/gpu/gpu_train.c): the same microbatch samples, the same tree over the
 * microbatches and the ranks (subtree sums exchanged as bytes through the
 * host), the same norm, clipping and AdamW on this rank's slice; the bits
 * are the CPU's. The host copies of the state are refreshed when a digest,
 * a checkpoint, a tap or the flip hook needs them. */
static bool host_state_needed(const trainer *tr, long step) {
    const dck_train_config *c = &tr->c;
    return (c->digest_every > 0 && (step % c->digest_every == 0 || step == c->steps)) ||
           (c->out[0] && ((c->ckpt_every > 0 && step % c->ckpt_every == 0) || step == c->steps));
}

/* NCCL between the ranks' GPUs when every rank has a GPU of its own (NCCL
 * refuses two ranks on one GPU); otherwise, or when NCCL cannot be loaded,
 * the subtree sums travel through the host and MPI, as bytes too. */
static dck_status dev_nccl_setup(trainer *tr) {
    struct {
        char host[64];
        int dev;
    } me, *all = dck_xcalloc((size_t)tr->K, sizeof *all);
    if (!all) return dck_oom("train");
    memset(&me, 0, sizeof me);
    (void)gethostname(me.host, sizeof me.host - 1);
    me.dev = dck_gt_device_index(tr->dev);
    dck_status s = dck_comm_allgather(tr->comm, &me, all, sizeof me);
    bool distinct = !s;
    for (int i = 0; distinct && i < tr->K; i++) {
        distinct = all[i].dev >= 0;
        for (int j = 0; distinct && j < i; j++)
            distinct = all[i].dev != all[j].dev || strncmp(all[i].host, all[j].host, sizeof me.host);
    }
    free(all);
    if (s || !distinct) return s;
    unsigned char id[DCK_TK_NCCL_ID];
    memset(id, 0, sizeof id);
    s = dck_comm_agree(tr->comm, dck_gt_nccl_id(tr->dev, tr->comm, id));
    if (!s) s = dck_comm_bcast(tr->comm, id, sizeof id, 0);
    if (!s) s = dck_comm_agree(tr->comm, dck_gt_nccl_join(tr->dev, id, tr->K, tr->rank, tr->comm));
    if (s && dck_comm_broken(tr->comm)) return s; /* a rank is missing: MPI cannot carry on either */
    if (s) {
        say(tr, 1, "no NCCL between the GPUs (%s): gradients between ranks through MPI",
            dck_last_error());
        return DCK_OK;
    }
    tr->nccl = true;
    return DCK_OK;
}

static dck_status step_once_dev(trainer *tr, long step, dck_train_step_info *si) {
    dck_status s = DCK_OK;
    size_t P = tr->P;
    dck_gt *g = tr->dev;
    bool taps = tr->hooks && tr->hooks->tap;
    float inv_m = 1.0f / (float)tr->M;
    float lr = dck_lr_at(&tr->c, step);
    tr->cur_step = step;
    if (taps) { /* the tap sees (and may change) the weights: a round trip */
        DCK_TRY(dck_gt_download_state(g, tr->master, NULL, NULL));
        dck_train_tap_state(tr->hooks, &tr->m, step, DCK_TAP_WEIGHTS, tr->master, NULL, 0, P);
        DCK_TRY(dck_gt_upload_state(g, tr->master, NULL, NULL));
    }
    size_t B = (size_t)tr->c.batch, S1 = (size_t)tr->c.seq + 1;
    uint16_t *tok = tr->tok[0];
    float fast_loss = 0.0f;
    for (int i = 0; i < tr->nloc; i++) {
        size_t j = tr->mb_lo + (size_t)i;
        for (size_t b = 0; b < B; b++)
            dck_data_sample(tr->data, ((uint64_t)(step - 1) * (uint64_t)tr->M + j) * B + b,
                            tok + b * S1);
        DCK_TRY(dck_gt_microbatch(g, i, tok, &tr->losses[i]));
        fast_loss += tr->losses[i];
    }
    float loss;
    if (tr->c.mode == DCK_MODE_DET) {
        DCK_TRY(dck_gt_tree(g, tr->nloc));
        if (tr->K == 1) {
            memcpy(tr->all_losses, tr->losses, (size_t)tr->nloc * sizeof(float));
        } else {
            if ((s = dck_comm_allgather(tr->comm, tr->losses, tr->all_losses,
                                        (size_t)tr->nloc * sizeof(float))))
                return s;
            if (tr->nccl) {
                DCK_TRY(dck_gt_nccl_tree(g, tr->K));
            } else {
                DCK_TRY(dck_gt_grad_io(g, 0, tr->dev_host, DCK_TK_D2H));
                if ((s = dck_comm_allgather(tr->comm, tr->dev_host, tr->gather, P * sizeof(float))))
                    return s;
                DCK_TRY(dck_gt_tree_host(g, tr->gather, tr->K));
            }
        }
        float *lp[DCK_TRAIN_MAX_MICROBATCHES];
        for (int j = 0; j < tr->M; j++) lp[j] = &tr->all_losses[j];
        dck_tree_sum(lp, (size_t)tr->M, 1);
        loss = tr->all_losses[0] * inv_m;
    } else {
        if (tr->K > 1) {
            if (tr->nccl) {
                DCK_TRY(dck_gt_nccl_allreduce(g));
            } else {
                DCK_TRY(dck_gt_grad_io(g, 0, tr->acc, DCK_TK_D2H));
                if ((s = dck_comm_allreduce_sum_f32(tr->comm, tr->acc, P))) return s;
                DCK_TRY(dck_gt_grad_io(g, 0, tr->acc, DCK_TK_H2D));
            }
            if ((s = dck_comm_allreduce_sum_f32(tr->comm, &fast_loss, 1))) return s;
        }
        loss = fast_loss * inv_m;
    }
    DCK_TRY(check_loss(tr, step, loss));
    float sumsq = 0.0f;
    DCK_TRY(dck_gt_scale_sumsq(g, inv_m, &sumsq));
    if (taps) {
        DCK_TRY(dck_gt_grad_io(g, 0, tr->dev_host, DCK_TK_D2H));
        dck_train_tap_state(tr->hooks, &tr->m, step, DCK_TAP_GRADIENTS, tr->dev_host, NULL, 0, P);
        DCK_TRY(dck_gt_grad_io(g, 0, tr->dev_host, DCK_TK_H2D));
        /* the norm of the gradient the tap left (the CPU path's order) */
        sumsq = dck_sumsq(tr->dev_host, P);
    }
    float norm = sqrtf(sumsq);
    if (!dck_tm_finite(norm)) /* rare: is an element not finite, and which */
        DCK_TRY(dck_gt_grad_io(g, 0, tr->dev_host, DCK_TK_D2H));
    DCK_TRY(check_gradient(tr, step, norm, tr->dev_host));
    float gscale = (tr->c.clip > 0.0f && norm > tr->c.clip) ? tr->c.clip / (norm + 1e-6f) : 1.0f;
    dck_tm_adamw k = dck_adamw_consts(&tr->c, step, lr, gscale);
    DCK_TRY(dck_gt_adamw(g, &k));
    uint64_t bad = UINT64_MAX;
    DCK_TRY(dck_gt_first_nonfinite(g, &bad));
    DCK_TRY(check_weights(tr, step, bad == UINT64_MAX ? SIZE_MAX : (size_t)bad));
    if (taps) {
        DCK_TRY(dck_gt_download_state(g, NULL, tr->m1, tr->m2));
        dck_train_tap_state(tr->hooks, &tr->m, step, DCK_TAP_EXP_AVG, tr->m1, tr->m2, tr->lo, tr->hi);
        DCK_TRY(dck_gt_upload_state(g, NULL, tr->m1, tr->m2));
    }
    bool flip = step == tr->c.flip_step;
    if (tr->K > 1 || flip) {
        /* ZeRO-1: the slices travel as bytes through the host */
        DCK_TRY(dck_gt_download_master_slice(g, tr->master));
        if (tr->K > 1) {
            size_t counts[DCK_TRAIN_MAX_RANKS], displs[DCK_TRAIN_MAX_RANKS];
            for (int r = 0; r < tr->K; r++) {
                counts[r] = (tr->part[r + 1] - tr->part[r]) * sizeof(float);
                displs[r] = tr->part[r] * sizeof(float);
            }
            if ((s = dck_comm_allgatherv(tr->comm, tr->master + tr->lo,
                                         (tr->hi - tr->lo) * sizeof(float), tr->master, counts,
                                         displs)))
                return s;
        }
        if (flip) { /* testing hook: as on the CPU, after the update */
            long t = dck_model_find(&tr->m, tr->c.flip_tensor);
            float *w = tr->master + tr->m.params[t].offset + tr->c.flip_index;
            *w = dck_f32_from_bits(dck_f32_bits(*w) ^ 1u);
        }
        DCK_TRY(dck_gt_upload_state(g, tr->master, NULL, NULL));
    } else {
        DCK_TRY(dck_gt_refresh_weights(g));
    }
    if (host_state_needed(tr, step)) DCK_TRY(dck_gt_download_state(g, tr->master, tr->m1, tr->m2));
    return step_info(tr, step, loss, norm, lr, si);
}

/* ------------------------------------------------------------------ setup */

static void release(trainer *tr) {
    dck_gt_free(tr->dev);
    free(tr->dev_host);
    if (tr->gbufs)
        for (int i = 0; i < tr->nloc; i++) free(tr->gbufs[i]);
    free(tr->gbufs);
    if (tr->scratch)
        for (int i = 0; i < tr->T; i++) free(tr->scratch[i]);
    free(tr->scratch);
    if (tr->ws)
        for (int i = 0; i < tr->T; i++) dck_workspace_free(tr->ws[i]);
    free(tr->ws);
    if (tr->tok)
        for (int i = 0; i < tr->T; i++) free(tr->tok[i]);
    free(tr->tok);
    if (tr->wparams != tr->master) free(tr->wparams);
    free(tr->master);
    free(tr->m1);
    free(tr->m2);
    free(tr->bf16);
    free(tr->gather);
    free(tr->acc);
    free(tr->losses);
    free(tr->all_losses);
    free(tr->part);
    dck_data_free(tr->data);
    dck_model_release(&tr->m);
    if (tr->traj) fclose(tr->traj);
    free(tr->recorded);
    free(tr->rec_tail);
    if (tr->lock_fd >= 0) close(tr->lock_fd); /* the lock goes last */
    free(tr->config_json);
    free(tr->traj_path);
    pthread_mutex_destroy(&tr->lock);
}

static void dev_activations(void *ctx, float *act, size_t n) {
    dck_train_tap_activations(ctx, act, n);
}

static dck_status setup(trainer *tr) {
    const dck_train_config *c = &tr->c;
    /* the limits the step's stack arrays are sized by: the option table's
     * range of --microbatches (checked by dck_train_config_check) and the
     * number of ranks */
    DCK_TRY(dck_train_config_check(c));
    DCK_TRY(dck_train_config_ranks(c, tr->K));
    DCK_TRY(dck_model_init(&tr->m, c));
    tr->m.tap = tr->hooks ? tr->hooks->tap : NULL; /* the activation tap (train_inject.c) */
    if (c->flip_step > 0) {
        long t = dck_model_find(&tr->m, c->flip_tensor);
        if (t < 0)
            return dck_set_error(DCK_ERR_INVALID, "--flip-bit: no parameter %s (names look like "
                                 "model.blocks.0.attn.qkv.weight)", c->flip_tensor);
        if (c->flip_index >= tr->m.params[t].numel)
            return dck_set_error(DCK_ERR_INVALID, "--flip-bit: index %llu beyond %s (%zu elements)",
                                 (unsigned long long)c->flip_index, c->flip_tensor,
                                 tr->m.params[t].numel);
    }
    tr->P = tr->m.total;
    tr->M = c->microbatches;
    tr->nloc = tr->M / tr->K;
    tr->mb_lo = (size_t)tr->rank * (size_t)tr->nloc;
    tr->T = c->threads > 0 ? c->threads : 1;
    tr->part = dck_xcalloc((size_t)tr->K + 1, sizeof *tr->part);
    if (!tr->part) return dck_oom(NULL);
    dck_zero_partition(&tr->m, tr->K, tr->part);
    tr->lo = tr->part[tr->rank];
    tr->hi = tr->part[tr->rank + 1];
    char note[512];
    DCK_TRY(dck_train_device_open(&tr->m, tr->rank, tr->nloc, tr->lo, tr->hi, &tr->dev, note,
                                  sizeof note));
    if (note[0]) say(tr, 1, "%s", note);
    /* the activation tap between forward and backward: on the device path a
     * host copy of the microbatch's activations, written back after it */
    if (tr->dev && tr->m.tap) dck_gt_set_activation_hook(tr->dev, dev_activations, &tr->m);
    if (tr->dev && dck_gt_device_index(tr->dev) >= 0)
        say(tr, 0, "the step on CUDA device %d (rank 0): %.1f MiB of device memory",
            dck_gt_device_index(tr->dev), (double)dck_gt_device_bytes(tr->dev) / 1048576.0);
    else if (tr->dev)
        say(tr, 0, "the step on the GPU path's CPU twin (%.1f MiB)",
            (double)dck_gt_device_bytes(tr->dev) / 1048576.0);
    size_t P = tr->P, own = tr->hi - tr->lo;
    tr->master = dck_xcalloc(P, sizeof(float));
    tr->wparams = is_bf16(tr) ? dck_xcalloc(P, sizeof(float)) : tr->master;
    tr->m1 = dck_xcalloc(own, sizeof(float));
    tr->m2 = dck_xcalloc(own, sizeof(float));
    tr->bf16 = dck_xcalloc(own, sizeof(uint16_t));
    tr->losses = dck_xcalloc((size_t)tr->nloc, sizeof(float));
    tr->all_losses = dck_xcalloc((size_t)tr->M, sizeof(float));
    tr->ws = dck_xcalloc((size_t)tr->T, sizeof *tr->ws);
    tr->tok = dck_xcalloc((size_t)tr->T, sizeof *tr->tok);
    if (!tr->master || !tr->wparams || !tr->m1 || !tr->m2 || !tr->bf16 || !tr->losses ||
        !tr->all_losses || !tr->ws || !tr->tok)
        return dck_oom("train");
    for (int w = 0; w < tr->T; w++) {
        tr->ws[w] = tr->dev ? NULL : dck_workspace_create(&tr->m); /* the device has its own */
        tr->tok[w] = dck_xcalloc((size_t)c->batch * ((size_t)c->seq + 1), sizeof(uint16_t));
        if ((!tr->ws[w] && !tr->dev) || !tr->tok[w]) return dck_oom("train");
    }
    if (c->mode == DCK_MODE_DET) {
        tr->gbufs = dck_xcalloc((size_t)tr->nloc, sizeof *tr->gbufs);
        if (!tr->gbufs) return dck_oom("train");
        for (int i = 0; !tr->dev && i < tr->nloc; i++) /* on the device: there */
            if (!(tr->gbufs[i] = dck_xcalloc(P, sizeof(float))))
                return dck_oom("train");
        if (tr->K > 1 && !(tr->gather = dck_xcalloc(P * (size_t)tr->K, sizeof(float))))
            return dck_oom("train");
    } else {
        tr->acc = dck_xcalloc(P, sizeof(float));
        tr->scratch = dck_xcalloc((size_t)tr->T, sizeof *tr->scratch);
        if (!tr->acc || !tr->scratch) return dck_oom("train");
        for (int w = 0; !tr->dev && w < tr->T; w++)
            if (!(tr->scratch[w] = dck_xcalloc(P, sizeof(float))))
                return dck_oom("train");
    }
    if (tr->dev && !(tr->dev_host = dck_xcalloc(P, sizeof(float)))) return dck_oom("train");
    DCK_TRY(dck_data_open(c, &tr->data));
    DCK_TRY(dck_train_config_json(c, &tr->config_json));
    dck_model_init_weights(&tr->m, tr->master);
    return DCK_OK;
}

/* One writer per run directory: rank 0 holds flock(LOCK_EX) on RUN/.lock
 * from before it looks at the directory until the run ends (the kernel drops
 * it when the process dies, so a killed run leaves no stale lock), and
 * writes its pid there so that a second writer can name the holder. */
#define DCK_TRAIN_LOCK ".lock"
static dck_status take_lock(trainer *tr) {
    char *p = dck_path_join(tr->c.out, DCK_TRAIN_LOCK);
    if (!p) return dck_oom(NULL);
    dck_status s = DCK_OK;
    /* O_NOFOLLOW: a link planted as .lock never truncates what it points at */
    int fd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0) {
        s = dck_set_error(DCK_ERR_IO, "%s: cannot open the run's lock file: %s", p, strerror(errno));
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            char buf[32] = "";
            ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
            long pid = n > 0 ? strtol(buf, NULL, 10) : 0;
            char who[48] = "a process whose pid is not yet recorded";
            if (pid > 0) snprintf(who, sizeof who, "pid %ld", pid);
            s = dck_set_error(DCK_ERR_INVALID, "%s: another detcheck train (%s) is writing into "
                              "this run directory (it holds %s); wait for it, or choose another --out",
                              tr->c.out, who, p);
        } else {
            s = dck_set_error(DCK_ERR_IO, "%s: cannot lock: %s", p, strerror(errno));
        }
    } else {
        char buf[32];
        int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)n, 0) != n)
            s = dck_set_error(DCK_ERR_IO, "%s: cannot write: %s", p, strerror(errno));
    }
    if (s && fd >= 0) close(fd);
    if (!s) tr->lock_fd = fd;
    free(p);
    return s;
}

static dck_status check_fresh_out(trainer *tr) {
    if (!tr->c.out[0] || tr->c.resume || tr->c.resume_from[0]) return DCK_OK;
    long *steps = NULL;
    size_t n = 0;
    dck_status s = dck_ckpt_list(tr->c.out, &steps, &n, NULL, NULL);
    free(steps);
    if (!s && n)
        s = dck_set_error(DCK_ERR_INVALID, "%s already holds checkpoints: pass --resume to continue "
                          "that run, or another --out",
                          tr->c.out);
    return s;
}

dck_status dck_train_run(const dck_train_config *cfg, dck_comm *comm, const dck_train_hooks *hooks,
                         dck_train_result *res) {
    trainer tr;
    memset(&tr, 0, sizeof tr);
    memset(res, 0, sizeof *res);
    pthread_mutex_init(&tr.lock, NULL);
    tr.c = *cfg;
    if (tr.c.decay_steps <= 0) tr.c.decay_steps = tr.c.steps;
    tr.comm = comm ? comm : dck_comm_self();
    tr.hooks = hooks;
    tr.rank = dck_comm_rank(tr.comm);
    tr.K = dck_comm_size(tr.comm);
    tr.lock_fd = -1;
    dck_status s = setup(&tr);
    if (!s && tr.rank == 0 && tr.c.out[0]) {
        s = dck_train_mkdir_p(tr.c.out);
        if (!s) s = take_lock(&tr);
        if (!s) s = check_fresh_out(&tr);
    }
    s = dck_comm_agree(tr.comm, s);
    long start = 0;
    if (!s && (tr.c.resume || tr.c.resume_from[0])) {
        dck_train_state st = state_of(&tr);
        s = dck_comm_agree(tr.comm, dck_train_ckpt_resume(&st, &start));
    }
    if (!s && is_bf16(&tr))
        for (size_t i = 0; i < tr.P; i++) tr.wparams[i] = dck_bf16_round(tr.master[i]);
    /* the state, fresh or resumed (a checkpoint is the same on any device) */
    if (!s && tr.dev) s = dck_comm_agree(tr.comm, dck_gt_upload_state(tr.dev, tr.master, tr.m1, tr.m2));
    if (!s && tr.dev && tr.K > 1) s = dck_comm_agree(tr.comm, dev_nccl_setup(&tr));
    if (!s) s = dck_comm_agree(tr.comm, traj_open(&tr, start));
    res->first_step = start + 1;
    res->last_step = start;
    double t0 = now_s();
    for (long step = start + 1; !s && step <= tr.c.steps; step++) {
        dck_train_step_info si;
        s = step_once(&tr, step, &si);
        if (s) break;
        si.seconds = now_s() - t0;
        dck_status ws = DCK_OK;
        if (tr.rank == 0) {
            ws = traj_write(&tr, &si);
            if (!ws && tr.hooks && tr.hooks->on_step) tr.hooks->on_step(tr.hooks->ctx, &si);
        }
        /* a record that could not be written (a full disk) stops every rank */
        if ((s = dck_comm_agree(tr.comm, ws))) break;
        if (step == start + 1) res->first_loss = si.loss;
        res->last_loss = si.loss;
        res->last_step = step;
        res->has_root = si.has_root;
        if (si.has_root) res->final_root = si.root;
        bool ckpt = tr.c.out[0] &&
                    ((tr.c.ckpt_every > 0 && step % tr.c.ckpt_every == 0) || step == tr.c.steps);
        if (ckpt) {
            dck_train_state st = state_of(&tr);
            s = dck_train_ckpt_save(&st, step, si.lr);
        }
    }
    res->seconds = now_s() - t0;
    long done = res->last_step - start;
    res->steps_per_s = res->seconds > 0 && done > 0 ? (double)done / res->seconds : 0.0;
    res->recheck_step = tr.recheck_step;
    snprintf(res->recheck_what, sizeof res->recheck_what, "%s", tr.recheck_what);
    release(&tr);
    return s;
}

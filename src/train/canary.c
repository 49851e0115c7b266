/* detcheck canary: the same short deterministic training run on every
 * device, compared bit for bit with an oracle (canary.h).
 *
 * Every rank trains alone (dck_train_run on its own single-rank
 * communicator: no reduction crosses ranks, so one faulty device cannot
 * contaminate another), and a tap (train_inject.c) records at every step the
 * digest of every tensor at four points: weights before the step, gradients
 * after backward, Adam's two moments after the update. The trainer's own
 * root digest of the state after the step closes each step. Rank 0 collects
 * the records with a deadline (dck_comm_gather_deadline: a dead or hung rank
 * is named, never waited for), finds each rank's first differing (step,
 * point, tensor) against the oracle, and fetches that tensor from the rank
 * and from the oracle's side to count the differing elements and bits
 * (dck_canary_check: collect, compare, fetch). Golden files are read and
 * written by canary_golden.c. */
#include "train/canary.h"
#include "gpu/gpu.h"
#include "gpu/gpu_choice.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ presets */

typedef struct {
    const char *name, *help;
    int vocab, layers, width, heads, seq, batch, microbatches;
    long steps;
} preset;

/* Canary's own sizes (train's --preset names model shapes only): tiny,
 * well under a second on one CPU core (the tests); cpu, train's default
 * model for 20 steps (a CPU socket); gpu, enough work per step to occupy
 * every SM of a data-center GPU. */
static const preset presets[] = {
    {"tiny", "P = 30k, 8 steps: well under a second on one CPU core (default)", 64, 2, 32, 4, 16, 1, 4, 8},
    {"cpu", "P = 135k, 20 steps: train's default model, seconds on a CPU", 256, 2, 64, 4, 32, 1, 8, 20},
    {"gpu", "P = 27M, 20 steps: keeps a GPU's SMs busy (minutes on a CPU)", 8192, 6, 512, 8, 256, 4, 8,
     20},
};
#define NPRESETS (sizeof presets / sizeof presets[0])

const char *dck_canary_preset_name(size_t i) { return i < NPRESETS ? presets[i].name : NULL; }
const char *dck_canary_preset_help(size_t i) { return i < NPRESETS ? presets[i].help : NULL; }

dck_status dck_canary_preset(dck_train_config *c, const char *name) {
    for (size_t i = 0; i < NPRESETS; i++) {
        const preset *p = &presets[i];
        if (strcmp(name, p->name) != 0) continue;
        c->vocab = p->vocab;
        c->layers = p->layers;
        c->width = p->width;
        c->heads = p->heads;
        c->seq = p->seq;
        c->batch = p->batch;
        c->microbatches = p->microbatches;
        c->steps = p->steps;
        c->warmup = p->steps / 4;
        return DCK_OK;
    }
    return dck_set_error(DCK_ERR_INVALID, "--preset: unknown canary preset '%s' (tiny, cpu, gpu)", name);
}

/* ------------------------------------------------------------------ injection */

static const struct {
    const char *prefix; /* of TENSOR */
    dck_tap_point point;
} inject_points[] = {
    {"model.", DCK_TAP_WEIGHTS},
    {"grad.", DCK_TAP_GRADIENTS},
    {"optimizer.exp_avg_sq.", DCK_TAP_EXP_AVG_SQ}, /* before its prefix exp_avg. */
    {"optimizer.exp_avg.", DCK_TAP_EXP_AVG},
};
static const char *const point_prefix[DCK_TAP_RECORDED] = {"model.", "grad.", "optimizer.exp_avg.",
                                                            "optimizer.exp_avg_sq."};

/* strict unsigned decimal */
static bool parse_u64(const char *s, size_t n, uint64_t max, uint64_t *out) {
    if (n == 0 || n > 20) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return false;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    if (v > max) return false;
    *out = v;
    return true;
}

dck_status dck_canary_inject_parse(const char *spec, dck_canary_inject *inj) {
    memset(inj, 0, sizeof *inj);
    int fields = 1;
    for (const char *c = spec; *c; c++) fields += *c == ':';
    if (fields != 5) /* no part may hold a ':' (tensor names have none) */
        return dck_set_error(DCK_ERR_INVALID, "--inject: '%s' has %d field%s, not the five of "
                             "RANK:STEP:TENSOR:INDEX:BIT", spec, fields, fields == 1 ? "" : "s");
    const char *f[5];
    size_t len[5];
    const char *p = spec;
    for (int i = 0; i < 5; i++) {
        const char *c = i < 4 ? strchr(p, ':') : p + strlen(p);
        if (!c) break;
        f[i] = p;
        len[i] = (size_t)(c - p);
        p = c + 1;
        if (i == 4 && strchr(f[4], ':')) c = NULL;
        if (i == 4) goto fields;
    }
    return dck_set_error(DCK_ERR_INVALID, "--inject: '%s' is not RANK:STEP:TENSOR:INDEX:BIT", spec);
fields:;
    uint64_t rank, step, index, bit;
    if (!parse_u64(f[0], len[0], DCK_TRAIN_MAX_RANKS * 64, &rank))
        return dck_set_error(DCK_ERR_INVALID, "--inject: bad RANK in '%s'", spec);
    if (!parse_u64(f[1], len[1], 1u << 30, &step) || step == 0)
        return dck_set_error(DCK_ERR_INVALID, "--inject: bad STEP in '%s' (steps count from 1)", spec);
    if (len[2] == 0 || len[2] >= sizeof inj->tensor)
        return dck_set_error(DCK_ERR_INVALID, "--inject: bad TENSOR in '%s'", spec);
    if (!parse_u64(f[3], len[3], UINT64_MAX, &index))
        return dck_set_error(DCK_ERR_INVALID, "--inject: bad INDEX in '%s'", spec);
    if (!parse_u64(f[4], len[4], 31, &bit))
        return dck_set_error(DCK_ERR_INVALID, "--inject: bad BIT in '%s' (0 to 31 of a float32)", spec);
    memcpy(inj->tensor, f[2], len[2]);
    inj->tensor[len[2]] = 0;
    inj->on = true;
    inj->rank = (int)rank;
    inj->step = (long)step;
    inj->index = index;
    inj->bit = (int)bit;
    return DCK_OK;
}

/* ------------------------------------------------------------------ one run */

typedef struct {
    long steps;
    size_t np, P;
    dck_digest *roots;   /* [steps] */
    dck_digest *dg;      /* [steps][DCK_TAP_RECORDED][np] */
    float *hist;         /* [steps][DCK_TAP_RECORDED][P] when kept, else the last step only */
    long hist_first;     /* first step held in hist */
} trace;

static void trace_release(trace *t) {
    free(t->roots);
    free(t->dg);
    free(t->hist);
    memset(t, 0, sizeof *t);
}

static dck_digest *trace_dg(const trace *t, long step, int point) {
    return t->dg + ((size_t)(step - 1) * DCK_TAP_RECORDED + (size_t)point) * t->np;
}

typedef struct {
    trace *t;
    const dck_canary_inject *inj; /* NULL: none */
    dck_tap_point inj_point;
    size_t inj_elem;              /* element of the flat vector (or of the activations) */
    volatile int inj_beyond;      /* activations index past the end (set from worker threads) */
    size_t inj_act_n;
    dck_status err;
} tap_ctx;

static void flip(float *x, int bit) { *x = dck_f32_from_bits(dck_f32_bits(*x) ^ (1u << bit)); }

static void on_state(void *ctx, const dck_model *m, dck_tap_point what, long step, float *data,
                     size_t lo, size_t hi) {
    tap_ctx *tc = ctx;
    trace *t = tc->t;
    if (tc->inj && tc->inj_point == what && tc->inj->step == step) {
        if (what == DCK_TAP_ACTIVATIONS) {
            if (tc->inj_elem < hi)
                flip(&data[tc->inj_elem], tc->inj->bit);
            else
                tc->inj_beyond = 1, tc->inj_act_n = hi;
        } else if (tc->inj_elem >= lo && tc->inj_elem < hi) {
            flip(&data[tc->inj_elem - lo], tc->inj->bit);
        }
    }
    if (what >= DCK_TAP_RECORDED || tc->err || step < 1 || step > t->steps) return;
    /* a canary rank trains alone: its slice is the whole vector */
    dck_digest *dg = trace_dg(t, step, what);
    for (size_t i = 0; i < m->nparams && !tc->err; i++) {
        const dck_param *p = &m->params[i];
        if (p->offset < lo || p->offset + p->numel > hi) {
            tc->err = dck_set_error(DCK_ERR_INVALID, "canary: a tap saw a partial slice");
            break;
        }
        tc->err = dck_digest_buffer(DCK_F32, p->shape, p->ndim, data + (p->offset - lo),
                                    p->numel * sizeof(float), 1, &dg[i]);
    }
    if (t->hist && step >= t->hist_first && hi - lo == t->P)
        memcpy(t->hist + ((size_t)(step - t->hist_first) * DCK_TAP_RECORDED + (size_t)what) * t->P,
               data, t->P * sizeof(float));
}

static void on_step(void *ctx, const dck_train_step_info *s) {
    tap_ctx *tc = ctx;
    if (s->step >= 1 && s->step <= tc->t->steps && s->has_root) tc->t->roots[s->step - 1] = s->root;
}

/* Which point and element an injection names, on model m. */
static dck_status resolve_inject(const dck_model *m, const dck_canary_inject *inj, long steps,
                                 tap_ctx *tc) {
    if (inj->step > steps)
        return dck_set_error(DCK_ERR_INVALID, "--inject: step %ld beyond the run's %ld steps",
                             inj->step, steps);
    if (!strcmp(inj->tensor, "activations")) {
        tc->inj_point = DCK_TAP_ACTIVATIONS;
        tc->inj_elem = (size_t)inj->index;
        return DCK_OK;
    }
    for (size_t i = 0; i < sizeof inject_points / sizeof inject_points[0]; i++) {
        size_t pl = strlen(inject_points[i].prefix);
        if (strncmp(inj->tensor, inject_points[i].prefix, pl) != 0) continue;
        char name[200];
        snprintf(name, sizeof name, "model.%s", inj->tensor + pl);
        long t = dck_model_find(m, name);
        if (t < 0) break;
        const dck_param *p = &m->params[t];
        if (inj->index >= p->numel)
            return dck_set_error(DCK_ERR_INVALID, "--inject: index %llu beyond %s (%zu elements)",
                                 (unsigned long long)inj->index, inj->tensor, p->numel);
        tc->inj_point = inject_points[i].point;
        tc->inj_elem = p->offset + (size_t)inj->index;
        return DCK_OK;
    }
    return dck_set_error(DCK_ERR_INVALID,
                         "--inject: no tensor %s (model.X, grad.X, optimizer.exp_avg.X or "
                         "optimizer.exp_avg_sq.X, where X is a parameter's name without "
                         "\"model.\", e.g. grad.blocks.0.attn.qkv.weight; or activations)",
                         inj->tensor);
}

/* The forward activations of one sequence, as the workspace lays them out
 * (train_model.c: the per-layer caches, then x_fin, ln_f, its mean and rstd,
 * the logits); the tap checks the real length again during the run. */
static uint64_t activations_per_sequence(const dck_train_config *c) {
    uint64_t S = (uint64_t)c->seq, d = (uint64_t)c->width, H = (uint64_t)c->heads, F = 4 * d,
             V = (uint64_t)c->vocab;
    uint64_t per_layer = S * d * 5 + S * 4 + S * 3 * d + H * S * S + S * F * 3;
    return per_layer * (uint64_t)c->layers + S * d * 2 + S * 2 + S * V;
}

dck_status dck_canary_inject_check(const dck_train_config *c, const dck_canary_inject *inj) {
    if (!inj->on) return DCK_OK;
    dck_model m;
    DCK_TRY(dck_model_init(&m, c));
    tap_ctx tc = {0};
    dck_status s = resolve_inject(&m, inj, c->steps, &tc);
    dck_model_release(&m);
    if (!s && tc.inj_point == DCK_TAP_ACTIVATIONS && inj->index >= activations_per_sequence(c))
        s = dck_set_error(DCK_ERR_INVALID, "--inject: index %llu beyond the %llu activations of a "
                          "sequence", (unsigned long long)inj->index,
                          (unsigned long long)activations_per_sequence(c));
    return s;
}

/* One run of the built-in training loop on this process's CPU. */
/* under_test: the run of a device under test, which goes on through
 * non-finite values (a faulty device's NaN is then a difference that names
 * it, at its first differing tensor); the CPU reference instead stops at
 * its first non-finite value (detcheck-train(1)), so settings that reach
 * one are refused before a healthy device could be blamed for the bits of
 * its NaNs, which differ from the CPU's. */
static dck_status run_once(const dck_train_config *c, const dck_canary_inject *inj, size_t budget,
                           bool under_test, trace *t) {
    memset(t, 0, sizeof *t);
    dck_model m;
    DCK_TRY(dck_model_init(&m, c));
    t->steps = c->steps;
    t->np = m.nparams;
    t->P = m.total;
    tap_ctx tc = {.t = t, .inj = inj && inj->on ? inj : NULL};
    dck_status s = tc.inj ? resolve_inject(&m, inj, c->steps, &tc) : DCK_OK;
    dck_model_release(&m);
    if (s) return s;
    t->roots = dck_xcalloc((size_t)t->steps, sizeof *t->roots);
    t->dg = dck_xcalloc((size_t)t->steps * DCK_TAP_RECORDED * t->np, sizeof *t->dg);
    if (!t->roots || !t->dg) {
        trace_release(t);
        return dck_oom("canary");
    }
    /* every step's state when it fits the budget (element detail at the
     * first differing step), else the last step's */
    double per_step = (double)t->P * DCK_TAP_RECORDED * sizeof(float);
    long keep = per_step * (double)t->steps <= (double)budget ? t->steps : 1;
    t->hist_first = t->steps - keep + 1;
    if (per_step * (double)keep <= (double)budget &&
        !(t->hist = dck_xcalloc((size_t)keep * DCK_TAP_RECORDED, t->P * sizeof(float)))) {
        trace_release(t);
        return dck_oom("canary");
    }
    dck_train_tap tap = {.ctx = &tc, .on_state = on_state, .faults = tc.inj != NULL || under_test};
    dck_train_hooks hooks = {.ctx = &tc, .on_step = on_step, .tap = &tap};
    dck_train_config rc = *c;
    rc.digest_every = 1;
    dck_train_result res;
    s = dck_train_run(&rc, NULL, &hooks, &res);
    if (!s && tc.err) s = tc.err;
    if (!s && tc.inj_beyond)
        s = dck_set_error(DCK_ERR_INVALID, "--inject: index %llu beyond the %zu activations of a "
                          "sequence", (unsigned long long)inj->index, tc.inj_act_n);
    if (s) trace_release(t);
    return s;
}

/* First (step, point, tensor) where two records differ, in the order the
 * step computes them; the root closes the step. 0: the same. */
typedef struct {
    long step;
    int point; /* DCK_TAP_RECORDED: the root */
    long tensor;
} where;

static int first_diff(const dck_digest *ra, const dck_digest *da, const dck_digest *rb,
                      const dck_digest *db, long steps, size_t np, where *w) {
    for (long s = 1; s <= steps; s++) {
        for (int p = 0; p < DCK_TAP_RECORDED; p++) {
            size_t base = ((size_t)(s - 1) * DCK_TAP_RECORDED + (size_t)p) * np;
            for (size_t i = 0; i < np; i++)
                if (!dck_digest_equal(da[base + i], db[base + i])) {
                    *w = (where){s, p, (long)i};
                    return 1;
                }
        }
        if (!dck_digest_equal(ra[s - 1], rb[s - 1])) {
            *w = (where){s, DCK_TAP_RECORDED, -1};
            return 1;
        }
    }
    return 0;
}

static void where_name(const dck_model *m, const where *w, char *buf, size_t n) {
    if (w->point >= DCK_TAP_RECORDED || w->tensor < 0)
        snprintf(buf, n, "root");
    else
        snprintf(buf, n, "%s%s", point_prefix[w->point],
                 m->params[w->tensor].name + strlen("model."));
}

/* ------------------------------------------------------------------ identity */

typedef struct {
    char host[64], device[96], id[64];
    int32_t rank, local, status, passes, pass_diff, pass_point;
    int32_t gpu; /* --device cuda: the device index the trainer took; -1 otherwise */
    int64_t pass_step, pass_tensor;
    char error[256];
} wire_head;

static void identity(wire_head *h, const char *device) {
    int local = dck_gpu_local_rank(NULL);
    h->local = local < 0 ? 0 : local;
    h->gpu = -1;
    if (gethostname(h->host, sizeof h->host - 1) != 0) snprintf(h->host, sizeof h->host, "?");
    char model[80] = "cpu";
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        while (fgets(line, sizeof line, f))
            if (!strncmp(line, "model name", 10)) {
                char *c = strchr(line, ':');
                if (c) {
                    c++;
                    while (*c == ' ' || *c == '\t') c++;
                    c[strcspn(c, "\n")] = 0;
                    snprintf(model, sizeof model, "%s", c);
                }
                break;
            }
        fclose(f);
    }
    if (!strcmp(device, "cuda")) {
        /* the trainer's GPU: each rank's trainer is a single-rank run (rank
         * 0), which takes the device of dck_gpu_choose(0, ...): the same
         * call here names the same device */
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        char bus[32];
        int n = 0;
        dck_gpu_choice ch = {0};
        if (dck_gpu_device_count(&n) == DCK_OK && dck_gpu_choose(0, n, &ch) == DCK_OK) h->gpu = ch.index;
        snprintf(h->device, sizeof h->device, "cuda:%d of %d, CUDA_VISIBLE_DEVICES=%.40s%s%.16s", ch.index, n,
                 vis ? vis : "unset", ch.visible[0] ? ": " : "", ch.visible);
        if (dck_gpu_pci_bus_id(ch.index, bus, sizeof bus) == DCK_OK)
            snprintf(h->id, sizeof h->id, "pci %s", bus);
        else
            snprintf(h->id, sizeof h->id, "pci ?");
        return;
    }
    snprintf(h->device, sizeof h->device, "%s %s", !strcmp(device, "twin") ? "twin on" : "cpu", model);
    /* the CPUs this rank may run on: what names a core set */
    cpu_set_t set;
    CPU_ZERO(&set);
    size_t len = 0;
    h->id[0] = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        len += (size_t)snprintf(h->id, sizeof h->id, "cpus ");
        int first = -1;
        for (int c = 0; c <= CPU_SETSIZE && len < sizeof h->id - 12; c++) {
            bool in = c < CPU_SETSIZE && CPU_ISSET(c, &set);
            if (in && first < 0) first = c;
            if (!in && first >= 0) {
                len += (size_t)snprintf(h->id + len, sizeof h->id - len, "%s%d", len > 5 ? "," : "",
                                        first);
                if (c - 1 > first)
                    len += (size_t)snprintf(h->id + len, sizeof h->id - len, "-%d", c - 1);
                first = -1;
            }
        }
    }
}

/* ------------------------------------------------------------------ golden files */

/* The golden file of c as the oracle's trace (canary_golden.c reads it). */
static dck_status golden_trace(const char *path, const dck_train_config *c, const dck_model *m, trace *t) {
    memset(t, 0, sizeof *t);
    dck_canary_golden g;
    DCK_TRY(dck_canary_golden_read(path, c, m, &g));
    t->steps = c->steps;
    t->np = m->nparams;
    t->P = m->total;
    t->roots = g.roots;
    t->dg = g.digests; /* the same layout: [steps][DCK_TAP_RECORDED][np] */
    g.roots = NULL;
    g.digests = NULL;
    dck_canary_golden_release(&g);
    return DCK_OK;
}

/* ------------------------------------------------------------------ agreement */

/* What every rank must share before records can be compared (detcheck-canary(1),
 * LIMITS: MPMD launches, mixed versions, per-node --data): one fixed-size block per
 * rank, gathered before any work, whatever this or another version holds
 * in it, so that its exchange itself cannot go wrong. */
#define CONFIG_BLOCK 4096
typedef struct {
    char magic[16];   /* "detcheck-canary" */
    char version[32]; /* DCK_VERSION_STRING */
    int32_t status;   /* this rank could not describe its run: error says why */
    int32_t pad;
    int64_t steps;
    uint64_t record;  /* bytes of this rank's record */
    char device[16];
    char data[40];    /* the token file's content digest; "synthetic" */
    char error[256];
    char flags[CONFIG_BLOCK - 16 - 32 - 8 - 8 - 8 - 16 - 40 - 256]; /* "name value\n"..., --data left out */
} config_block;
_Static_assert(sizeof(config_block) == CONFIG_BLOCK, "the config block keeps its size across versions");

static size_t record_bytes(long steps, size_t np);

static void describe_run(const dck_train_config *c, config_block *b) {
    memset(b, 0, sizeof *b);
    snprintf(b->magic, sizeof b->magic, "detcheck-canary");
    snprintf(b->version, sizeof b->version, "%s", DCK_VERSION_STRING);
    b->steps = c->steps;
    snprintf(b->device, sizeof b->device, "%s", c->device[0] ? c->device : "cpu");
    dck_train_config r = *c;
    r.data[0] = 0; /* by content below, not by path */
    dck_train_flag *fl = NULL;
    size_t n = 0, len = 0;
    char *json = NULL;
    json_t *o = NULL;
    dck_model m;
    dck_status s = dck_train_config_to_flags(&r, DCK_TRAIN_NUMERICS, &fl, &n);
    for (size_t i = 0; !s && i < n; i++) {
        int k = snprintf(b->flags + len, sizeof b->flags - len, "%s %s\n", fl[i].name,
                         fl[i].value ? fl[i].value : "");
        if (k < 0 || (size_t)k >= sizeof b->flags - len)
            s = dck_set_error(DCK_ERR_LIMIT, "canary: the run's flags exceed %zu bytes", sizeof b->flags);
        else
            len += (size_t)k;
    }
    free(fl);
    if (!s) s = dck_train_config_json(c, &json);
    if (!s && !(o = json_loads(json, 0, NULL))) s = dck_oom("canary");
    if (!s) {
        json_t *d = json_object_get(o, "data");
        snprintf(b->data, sizeof b->data, "%s", !c->data[0] ? "synthetic" : json_is_string(d) ? json_string_value(d) : "?");
    }
    json_decref(o);
    free(json);
    if (!s && !(s = dck_model_init(&m, c))) {
        b->record = record_bytes(c->steps, m.nparams);
        dck_model_release(&m);
    }
    if (s) {
        b->status = (int32_t)s;
        snprintf(b->error, sizeof b->error, "%s", dck_last_error());
    }
}

/* The value of flag `name` in a block's list ("" when absent: at its default). */
static void flag_value(const config_block *b, const char *name, char *out, size_t n) {
    size_t nl = strlen(name);
    out[0] = 0;
    for (const char *p = b->flags; *p;) {
        const char *e = memchr(p, '\n', (size_t)(b->flags + sizeof b->flags - p));
        if (!e) break;
        if ((size_t)(e - p) > nl && !strncmp(p, name, nl) && p[nl] == ' ') {
            snprintf(out, n, "%.*s", (int)(e - p - (long)nl - 1), p + nl + 1);
            return;
        }
        p = e + 1;
    }
}

/* Rank r's block against rank 0's: the first field that differs, named. */
static dck_status same_run(const config_block *a, const config_block *b, int r) {
    if (memcmp(b->magic, "detcheck-canary", 16) || strncmp(a->version, b->version, sizeof a->version))
        return dck_set_error(DCK_ERR_MISMATCH, "rank %d runs detcheck %.*s, rank 0 runs %.*s: every rank "
                             "must run the same version", r,
                             memcmp(b->magic, "detcheck-canary", 16) ? 7 : (int)sizeof b->version - 1,
                             memcmp(b->magic, "detcheck-canary", 16) ? "(older)" : b->version,
                             (int)sizeof a->version - 1, a->version);
    if (b->status)
        return dck_set_error((dck_status)b->status, "rank %d: %.*s", r, (int)sizeof b->error - 1, b->error);
    if (a->steps != b->steps)
        return dck_set_error(DCK_ERR_MISMATCH, "rank %d has --steps %lld, rank 0 has %lld", r,
                             (long long)b->steps, (long long)a->steps);
    /* every flag either lists, in the option table's order */
    for (int pass = 0; pass < 2; pass++) {
        const config_block *x = pass ? b : a;
        for (const char *p = x->flags; *p;) {
            const char *e = strchr(p, '\n'), *sp = memchr(p, ' ', e ? (size_t)(e - p) : 0);
            if (!e || !sp) break;
            char name[64], va[256], vb[256];
            snprintf(name, sizeof name, "%.*s", (int)(sp - p), p);
            flag_value(a, name, va, sizeof va);
            flag_value(b, name, vb, sizeof vb);
            if (strcmp(va, vb))
                return dck_set_error(DCK_ERR_MISMATCH, "rank %d has --%s %s, rank 0 has %s", r, name,
                                     vb[0] ? vb : "(default)", va[0] ? va : "(default)");
            p = e + 1;
        }
    }
    if (strncmp(a->device, b->device, sizeof a->device))
        return dck_set_error(DCK_ERR_MISMATCH, "rank %d has --device %.15s, rank 0 has %.15s", r, b->device,
                             a->device);
    if (strncmp(a->data, b->data, sizeof a->data))
        return dck_set_error(DCK_ERR_MISMATCH, "rank %d has --data with content %.39s, rank 0 has %.39s "
                             "(the token files differ)", r, b->data, a->data);
    if (a->record != b->record)
        return dck_set_error(DCK_ERR_MISMATCH, "rank %d has %llu-byte records, rank 0 has %llu", r,
                             (unsigned long long)b->record, (unsigned long long)a->record);
    return DCK_OK;
}

/* Every rank: the same verdict on whether all ranks run the same thing. */
static dck_status agree_on_run(const dck_canary_opts *o, dck_comm *comm) {
    int K = dck_comm_size(comm);
    if (K == 1) return DCK_OK;
    config_block mine, *all = calloc((size_t)K, sizeof *all);
    if (!all) return dck_oom("canary");
    describe_run(&o->cfg, &mine);
    dck_status s = dck_comm_allgather(comm, &mine, all, sizeof mine);
    for (int r = 0; r < K && !s; r++) {
        all[r].flags[sizeof all[r].flags - 1] = 0;
        s = same_run(&all[0], &all[r], r);
    }
    free(all);
    return s;
}

/* ------------------------------------------------------------------ the check */

void dck_canary_opts_init(dck_canary_opts *o) {
    memset(o, 0, sizeof *o);
    dck_train_config_init(&o->cfg);
    dck_canary_preset(&o->cfg, "tiny");
    o->timeout = 300;
    o->stall_rank = -1;
    o->hist_budget = (size_t)64 << 20;
}

void dck_canary_report_release(dck_canary_report *r) {
    free(r->ranks);
    r->ranks = NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

dck_status dck_canary_device_ready(dck_train_config *c) {
    const char *d = c->device;
    if (!d[0] || !strcmp(d, "cpu") || !strcmp(d, "twin")) return DCK_OK;
    bool want = !strcmp(d, "cuda");
    /* no narrowing of CUDA_VISIBLE_DEVICES: it could only name a device
     * before the runtime counts them, and a local rank beyond the count
     * then saw none (detcheck-gpu(7), DEVICE); the trainer takes its device by
     * dck_gpu_choose, local rank modulo the count, as train and hash do */
    int n = 0;
    dck_gpu_choice ch;
    dck_status s = dck_gpu_device_count(&n);
    if (!s) s = dck_gpu_choose(0, n, &ch);
    if (s && want)
        return dck_set_error(DCK_ERR_NODEVICE, "--device cuda: %s (CUDA_VISIBLE_DEVICES=%s)",
                             dck_last_error(), getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset");
    snprintf(c->device, sizeof c->device, "%s", s ? "cpu" : "cuda");
    return DCK_OK;
}

/* This rank's passes: the first is its record; later ones (--seconds) are
 * compared with it. */
static dck_status run_passes(const dck_canary_opts *o, int rank, const dck_model *m, trace *t,
                             wire_head *h) {
    const dck_canary_inject *inj = o->inject.on && o->inject.rank == rank ? &o->inject : NULL;
    double t0 = now_s();
    DCK_TRY(run_once(&o->cfg, inj, o->hist_budget, true, t));
    h->passes = 1;
    while (o->seconds > 0 && now_s() - t0 < o->seconds) {
        if (rank == 0 && o->progress) o->progress(o->ctx, now_s() - t0, o->seconds);
        trace again;
        DCK_TRY(run_once(&o->cfg, inj, 0, true, &again));
        h->passes++;
        where w;
        if (!h->pass_diff &&
            first_diff(t->roots, t->dg, again.roots, again.dg, t->steps, t->np, &w)) {
            h->pass_diff = h->passes;
            h->pass_step = w.step;
            h->pass_point = w.point;
            h->pass_tensor = w.tensor;
        }
        trace_release(&again);
    }
    if (rank == 0 && o->progress && o->seconds > 0) o->progress(o->ctx, o->seconds, o->seconds);
    (void)m;
    return DCK_OK;
}

/* Element counts of one tensor, a against the oracle's b. */
static void count_bits(const float *a, const float *b, size_t n, dck_canary_rank *r) {
    r->numel = n;
    r->ndiff = 0;
    r->bits = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t x = dck_f32_bits(a[i]) ^ dck_f32_bits(b[i]);
        if (x) r->ndiff++, r->bits |= x;
    }
}

/* The tensor at (step, point, tensor) of a trace's kept state, or NULL. */
static const float *held(const trace *t, const dck_model *m, long step, int point, long tensor) {
    if (!t->hist || point >= DCK_TAP_RECORDED || tensor < 0 || step < t->hist_first) return NULL;
    return t->hist + ((size_t)(step - t->hist_first) * DCK_TAP_RECORDED + (size_t)point) * t->P +
           m->params[tensor].offset;
}

#define DETAIL_MAX 8 /* ranks whose first differing tensor travels to rank 0 */

static size_t record_bytes(long steps, size_t np) {
    return sizeof(wire_head) + (size_t)steps * (1 + DCK_TAP_RECORDED * np) * sizeof(dck_digest);
}

/* What every rank can check alone, the same way on every rank. */
static dck_status check_opts(const dck_canary_opts *o, int K) {
    if (o->cfg.steps < 1 || o->cfg.steps > DCK_CANARY_MAX_STEPS)
        return dck_set_error(DCK_ERR_INVALID, "--steps %ld: canary runs 1 to %d steps (with none, "
                             "nothing would be compared)", o->cfg.steps, DCK_CANARY_MAX_STEPS);
    if (o->golden && o->oracle != DCK_ORACLE_GOLDEN)
        return dck_set_error(DCK_ERR_INVALID, "--golden and --vote: two oracles; give one");
    if (o->oracle == DCK_ORACLE_GOLDEN && !o->golden)
        return dck_set_error(DCK_ERR_INVALID, "--golden needs a file name");
    if (o->oracle == DCK_ORACLE_GOLDEN && o->write_golden)
        return dck_set_error(DCK_ERR_INVALID, "--golden and --write-golden together");
    if (o->oracle == DCK_ORACLE_VOTE && K < DCK_CANARY_MIN_VOTERS)
        return dck_set_error(DCK_ERR_INVALID, "--vote needs at least %d ranks, the job has %d: %s",
                             DCK_CANARY_MIN_VOTERS, K, K == 1 ? "one rank would vote with itself"
                             : "two ranks cannot form a majority against one faulty rank");
    if (o->stall_rank >= K)
        return dck_set_error(DCK_ERR_INVALID, "--test-stall: rank %d, but the job has %d rank%s",
                             o->stall_rank, K, K == 1 ? "" : "s");
    if (o->inject.on && o->inject.rank >= K)
        return dck_set_error(DCK_ERR_INVALID, "--inject: rank %d, but the job has %d rank%s", o->inject.rank,
                             K, K == 1 ? "" : "s");
    return DCK_OK;
}

/* Rank 0 before any run: the golden file to write may replace only a
 * golden file, never an input (dck_output_check). */
static dck_status check_output(const dck_canary_opts *o) {
    if (!o->write_golden) return DCK_OK;
    const char *inputs[] = {o->golden, o->cfg.data[0] ? o->cfg.data : NULL};
    return dck_output_check("--write-golden", o->write_golden, "canary golden file", dck_canary_is_golden,
                            inputs, 2);
}

/* One check's state, handed from part to part: collect, compare, fetch. */
typedef struct {
    const dck_canary_opts *o;
    dck_comm *comm;
    int rank, K;
    const dck_model *m;
    long steps;
    size_t np;
    size_t rec, body;           /* bytes of a record, and of its digests after the head */
    trace mine;                 /* this rank's first pass */
    trace oracle;               /* rank 0: the CPU reference's or the golden file's */
    bool have_oracle;
    uint8_t *send;              /* this rank's record */
    uint8_t *all;               /* rank 0: every rank's, K records */
    bool *arrived;              /* rank 0: whose record came in time */
    double wait;                /* how long this rank waits for another */
    int64_t req[DETAIL_MAX][4]; /* rank 0: tensors to fetch: rank, step, point, tensor */
    int nreq;
    int donor;                  /* the rank whose tensors stand for the oracle's; -1 none */
} check_run;

/* Collect, every rank: the oracle first on rank 0 (a bad golden file stops
 * every rank before any work), then this rank's passes, the CPU reference
 * (the default oracle) and the golden file asked for on rank 0, and the
 * records gathered on rank 0 with a deadline (x->all, x->arrived). A
 * status when the check cannot go on; rep->any_timeout when the other
 * ranks are left waiting then (only an abort ends the job). */
static dck_status collect(check_run *x, dck_canary_report *rep) {
    const dck_canary_opts *o = x->o;
    int rank = x->rank, K = x->K;
    long steps = x->steps;
    size_t np = x->np;
    dck_status s = DCK_OK;
    if (rank == 0) s = check_output(o);
    if (!s && rank == 0 && o->oracle == DCK_ORACLE_GOLDEN) {
        s = golden_trace(o->golden, &o->cfg, x->m, &x->oracle);
        x->have_oracle = !s;
    }
    s = dck_comm_agree(x->comm, s);
    if (s) return s;

    x->rec = record_bytes(steps, np);
    x->body = x->rec - sizeof(wire_head);
    x->send = dck_xcalloc(1, x->rec);
    x->all = rank == 0 ? dck_xcalloc((size_t)K, x->rec) : NULL;
    x->arrived = rank == 0 ? dck_xcalloc((size_t)K, sizeof *x->arrived) : NULL;
    if (!x->send || (rank == 0 && (!x->all || !x->arrived))) return dck_oom("canary");
    wire_head *h = (wire_head *)x->send;
    identity(h, o->cfg.device);
    h->rank = rank;
    if (rank == o->stall_rank) {
        /* testing hook: a hung device; rank 0 names it and aborts the job */
        sleep((unsigned)(o->timeout * 3 + 60));
        _exit(2);
    }
    dck_status rs = run_passes(o, rank, x->m, &x->mine, h);
    if (rs) {
        h->status = (int32_t)rs;
        snprintf(h->error, sizeof h->error, "%s", dck_last_error());
    } else {
        memcpy(x->send + sizeof *h, x->mine.roots, (size_t)steps * sizeof(dck_digest));
        memcpy(x->send + sizeof *h + (size_t)steps * sizeof(dck_digest), x->mine.dg,
               (size_t)steps * DCK_TAP_RECORDED * np * sizeof(dck_digest));
    }
    /* the default oracle: the same run on this CPU, computed by rank 0 */
    trace ref = {0};
    if (rank == 0 && o->oracle == DCK_ORACLE_CPU) {
        dck_train_config cpu = o->cfg;
        snprintf(cpu.device, sizeof cpu.device, "cpu");
        s = run_once(&cpu, NULL, o->hist_budget, false, &ref);
        if (s)
            s = dck_set_error(s, "the CPU reference run (the oracle): %s; the canary needs settings "
                              "whose run stays finite", dck_last_error());
        if (!s) {
            x->oracle = ref;
            memset(&ref, 0, sizeof ref);
            x->have_oracle = true;
        }
    }
    /* a golden record only from a run that the CPU reference confirms (or,
     * with --vote, that the caller trusts) */
    if (!s && rank == 0 && o->write_golden) {
        where w;
        if (rs)
            s = dck_set_error(rs, "--write-golden: rank 0's run failed: %s", h->error);
        else if (x->have_oracle &&
                 first_diff(x->mine.roots, x->mine.dg, x->oracle.roots, x->oracle.dg, steps, np, &w))
            s = dck_set_error(DCK_ERR_MISMATCH, "--write-golden: rank 0's run differs from the CPU "
                              "reference at step %ld: %s not written", w.step, o->write_golden);
        else if ((s = check_output(o))) /* the rule again at the moment of writing: the run took its seconds */
            s = dck_set_error(s, "%s (it changed while the canary ran): not written", dck_last_error());
        else
            s = dck_canary_golden_write(o->write_golden, &o->cfg, x->m, x->mine.roots, x->mine.dg);
    }
    if (s) {
        /* rank 0's own trouble (golden not written, reference failed): the
         * others are not waited for */
        rep->any_timeout = K > 1;
        return s;
    }
    x->wait = rank == 0 ? o->timeout : o->timeout * 3 + 60;
    s = dck_comm_gather_deadline(x->comm, x->send, x->all, x->rec, 0, 7101, x->wait, x->arrived);
    /* rank 0 gone, or a record of another size: only an abort ends the job */
    if (s) rep->any_timeout = K > 1;
    return s;
}

/* Compare, rank 0 alone, no communication: every rank's record against the
 * oracle's (with --vote, the majority's), into rep: each rank's row, its
 * first differing step and tensor, the exit code; and what fetch asks for:
 * the first differing tensor of up to DETAIL_MAX ranks (x->req) and the rank
 * whose tensors stand for the oracle's (x->donor). */
static dck_status compare(check_run *x, dck_canary_report *rep) {
    const dck_canary_opts *o = x->o;
    int K = x->K;
    long steps = x->steps;
    size_t rec = x->rec, np = x->np;
    const uint8_t *all = x->all;
    rep->ranks = dck_xcalloc((size_t)K, sizeof *rep->ranks);
    if (!rep->ranks) {
        dck_status s = dck_oom("canary");
        rep->any_timeout = K > 1;
        return s;
    }
    const dck_digest *oroots = NULL, *odg = NULL;
    if (x->have_oracle) oroots = x->oracle.roots, odg = x->oracle.dg;
    for (int r = 0; r < K; r++) {
        const wire_head *w = (const wire_head *)(all + (size_t)r * rec);
        dck_canary_rank *y = &rep->ranks[r];
        y->rank = r;
        y->gpu = -1;
        if (!x->arrived[r]) {
            y->result = DCK_CANARY_TIMEOUT;
            snprintf(y->host, sizeof y->host, "?");
            snprintf(y->device, sizeof y->device, "?");
            snprintf(y->error, sizeof y->error, "no report within %.0f s (dead or hung)", o->timeout);
            rep->any_timeout = true;
            continue;
        }
        snprintf(y->host, sizeof y->host, "%.*s", (int)sizeof w->host - 1, w->host);
        snprintf(y->device, sizeof y->device, "%.*s", (int)sizeof w->device - 1, w->device);
        snprintf(y->id, sizeof y->id, "%.*s", (int)sizeof w->id - 1, w->id);
        y->local = w->local;
        y->gpu = w->gpu;
        y->passes = w->passes;
        y->pass_diff = w->pass_diff;
        if (w->pass_diff) {
            where pw = {(long)w->pass_step, w->pass_point, (long)w->pass_tensor};
            y->pass_step = pw.step;
            where_name(x->m, &pw, y->pass_tensor, sizeof y->pass_tensor);
        }
        if (w->status) {
            y->result = DCK_CANARY_ERROR;
            snprintf(y->error, sizeof y->error, "%.*s", (int)sizeof w->error - 1, w->error);
        }
    }
    if (o->oracle == DCK_ORACLE_VOTE) {
        /* the largest group of identical records, if it is a majority */
        int best = -1, bestn = 0;
        for (int r = 0; r < K; r++) {
            if (rep->ranks[r].result != DCK_CANARY_SAME) continue;
            int n = 0;
            for (int q = 0; q < K; q++)
                n += rep->ranks[q].result == DCK_CANARY_SAME &&
                     !memcmp(all + (size_t)r * rec + sizeof(wire_head),
                             all + (size_t)q * rec + sizeof(wire_head), x->body);
            if (n > bestn) best = r, bestn = n;
        }
        for (int r = 0; r < K; r++)
            for (int q = 0; q <= r && rep->ranks[r].result == DCK_CANARY_SAME; q++)
                if (rep->ranks[q].result == DCK_CANARY_SAME &&
                    !memcmp(all + (size_t)r * rec + sizeof(wire_head),
                            all + (size_t)q * rec + sizeof(wire_head), x->body)) {
                    rep->ranks[r].group = q + 1;
                    break;
                }
        if (best >= 0 && 2 * bestn > K) {
            const uint8_t *b = all + (size_t)best * rec + sizeof(wire_head);
            oroots = (const dck_digest *)b;
            odg = (const dck_digest *)(b + (size_t)steps * sizeof(dck_digest));
            x->donor = best;
        } else {
            rep->no_majority = true;
        }
        snprintf(rep->oracle_text, sizeof rep->oracle_text, "majority (%d of %d ranks)", bestn, K);
    } else if (o->oracle == DCK_ORACLE_GOLDEN) {
        snprintf(rep->oracle_text, sizeof rep->oracle_text, "golden file %s", o->golden);
    } else {
        snprintf(rep->oracle_text, sizeof rep->oracle_text, "CPU reference on rank 0");
    }
    if (oroots) {
        char hex[33];
        dck_digest_to_hex(oroots[steps - 1], hex);
        snprintf(rep->final_root, sizeof rep->final_root, "%s", hex);
    }
    for (int r = 0; r < K && oroots; r++) {
        dck_canary_rank *y = &rep->ranks[r];
        if (y->result != DCK_CANARY_SAME) continue;
        const uint8_t *b = all + (size_t)r * rec + sizeof(wire_head);
        where w;
        if (first_diff((const dck_digest *)b, (const dck_digest *)(b + (size_t)steps * sizeof(dck_digest)),
                       oroots, odg, steps, np, &w)) {
            y->result = DCK_CANARY_DIFFERS;
            y->step = w.step;
            where_name(x->m, &w, y->tensor, sizeof y->tensor);
            if (x->nreq < DETAIL_MAX && w.point < DCK_TAP_RECORDED) {
                int64_t *q = x->req[x->nreq++];
                q[0] = r, q[1] = w.step, q[2] = w.point, q[3] = w.tensor;
            }
        } else if (y->pass_diff) {
            y->result = DCK_CANARY_DIFFERS; /* intermittent: a later pass left the first */
            y->step = y->pass_step;
            snprintf(y->tensor, sizeof y->tensor, "%s", y->pass_tensor);
        } else {
            rep->identical++;
        }
    }
    /* golden: a rank that matches it lends the oracle's tensors */
    if (o->oracle == DCK_ORACLE_GOLDEN)
        for (int r = 0; r < K && x->donor < 0; r++)
            if (rep->ranks[r].result == DCK_CANARY_SAME && !rep->ranks[r].pass_diff) x->donor = r;
    bool trouble = rep->no_majority || rep->any_timeout;
    for (int r = 0; r < K; r++) trouble |= rep->ranks[r].result >= DCK_CANARY_ERROR;
    rep->exit_code = trouble ? 2 : rep->identical == K ? 0 : 1;
    return DCK_OK;
}

/* Fetch, every rank: rank 0's verdict (exit code, donor, requests) to every
 * rank that reported, with a deadline; then each requested tensor from the
 * rank that differs and from the donor (or rank 0's CPU reference), and on
 * rank 0 their element and bit counts (rep->ranks[r]'s detail). After a
 * missing rank nothing more: rep->any_timeout, exit code 2. */
static dck_status fetch(check_run *x, dck_canary_report *rep) {
    const dck_canary_opts *o = x->o;
    int rank = x->rank, K = x->K;
    const dck_model *m = x->m;
    /* with a deadline: after a missing rank a collective could wait for it
     * forever (its tree may route through it), and the ranks that reported
     * must learn that the job ends (under mpirun --enable-recovery they
     * would hang in MPI_Bcast after rank 0's abort; detcheck-canary(1),
     * EXIT STATUS) */
    struct {
        int32_t ctl[4]; /* exit, donor, requests, a rank is missing */
        int64_t reqs[DETAIL_MAX * 4];
    } verdict;
    memset(&verdict, 0, sizeof verdict);
    verdict.ctl[0] = rep->exit_code;
    verdict.ctl[1] = o->oracle == DCK_ORACLE_CPU ? -1 : x->donor;
    verdict.ctl[2] = x->nreq;
    verdict.ctl[3] = rep->any_timeout;
    memcpy(verdict.reqs, x->req, sizeof verdict.reqs);
    dck_status s = dck_comm_bcast_deadline(x->comm, &verdict, sizeof verdict, 0, 7103, x->wait,
                                           rank == 0 ? x->arrived : NULL);
    if (s || verdict.ctl[3]) {
        /* a rank is missing (or the verdict did not come): no collective is
         * safe now; rank 0, alive when the verdict came, ends the job after
         * its report */
        rep->any_timeout = K > 1;
        rep->wait_for_abort = rank != 0 && !s;
        rep->exit_code = 2;
        return s;
    }
    int64_t *reqs = verdict.reqs;
    rep->exit_code = verdict.ctl[0];
    int donor = verdict.ctl[1], nreq = verdict.ctl[2];
    size_t *counts = dck_xcalloc((size_t)K * 2, sizeof *counts);
    size_t *offs = dck_xcalloc((size_t)nreq + 1, sizeof *offs);
    bool detail_ok = counts && offs;
    /* what each rank sends: its own tensor when asked; the donor all of them */
    for (int i = 0; detail_ok && i < nreq; i++) {
        const int64_t *q = &reqs[i * 4];
        size_t bytes = m->params[q[3]].numel * sizeof(float);
        offs[i + 1] = offs[i] + bytes;
        counts[q[0]] += bytes;
        if (donor >= 0) counts[donor] += bytes;
    }
    /* a step beyond the kept state has no detail (the budget): the same
     * decision on every rank, from the same config */
    size_t total = 0;
    for (int r = 0; detail_ok && r < K; r++) counts[K + r] = total, total += counts[r];
    uint8_t *mysend = NULL, *recvb = NULL;
    if (detail_ok && total) {
        mysend = dck_xcalloc(1, counts[rank] + 1);
        recvb = dck_xcalloc(1, total);
        detail_ok = mysend && recvb;
        size_t at = 0;
        for (int pass = 0; detail_ok && pass < 2; pass++) /* own, then donated */
            for (int i = 0; i < nreq; i++) {
                const int64_t *q = &reqs[i * 4];
                if ((pass == 0 && q[0] != rank) || (pass == 1 && donor != rank)) continue;
                size_t bytes = offs[i + 1] - offs[i];
                const float *src = held(&x->mine, m, (long)q[1], (int)q[2], (long)q[3]);
                if (src) memcpy(mysend + at, src, bytes);
                at += bytes;
            }
    }
    s = dck_comm_agree(x->comm, detail_ok ? DCK_OK : dck_oom("canary"));
    if (!s && total) s = dck_comm_allgatherv(x->comm, mysend, counts[rank], recvb, counts, counts + K);
    if (!s && rank == 0 && total) {
        /* walk the blocks in the order they were packed */
        for (int i = 0; i < nreq; i++) {
            const int64_t *q = &reqs[i * 4];
            int r = (int)q[0];
            long step = (long)q[1];
            size_t bytes = offs[i + 1] - offs[i];
            /* rank r's own block: the requests of r before i come first */
            size_t own = counts[K + r];
            for (int j = 0; j < i; j++)
                if (reqs[j * 4] == r) own += offs[j + 1] - offs[j];
            const float *a = (const float *)(recvb + own);
            const float *b = NULL;
            if (o->oracle == DCK_ORACLE_CPU) {
                b = held(&x->oracle, m, step, (int)q[2], (long)q[3]);
            } else if (donor >= 0) {
                size_t d = counts[K + donor];
                for (int j = 0; j < nreq; j++)
                    if (reqs[j * 4] == donor) d += offs[j + 1] - offs[j];
                b = (const float *)(recvb + d + offs[i]);
            }
            /* held() on the sender is NULL past the kept steps: no detail then */
            bool kept = step >= x->mine.hist_first && x->mine.hist;
            if (a && b && kept) {
                dck_canary_rank *y = &rep->ranks[r];
                y->has_detail = true;
                y->detail_step = step;
                count_bits(a, b, bytes / sizeof(float), y);
            }
        }
    }
    free(mysend);
    free(recvb);
    free(counts);
    free(offs);
    return s;
}

dck_status dck_canary_check(const dck_canary_opts *o, dck_comm *comm, dck_canary_report *rep) {
    memset(rep, 0, sizeof *rep);
    int rank = dck_comm_rank(comm), K = dck_comm_size(comm);
    rep->nranks = K;
    rep->steps = o->cfg.steps;
    rep->exit_code = 2;
    dck_model m;
    /* the same settings on every rank first: records of other lengths
     * cannot meet, records of other runs compare as faults */
    dck_status s = check_opts(o, K);
    if (!s) s = dck_train_config_check(&o->cfg);
    if (!s) s = agree_on_run(o, comm);
    if (!s) s = dck_model_init(&m, &o->cfg);
    if (s) return s;
    rep->params = m.total;
    check_run x;
    memset(&x, 0, sizeof x);
    x.o = o;
    x.comm = comm;
    x.rank = rank;
    x.K = K;
    x.m = &m;
    x.steps = o->cfg.steps;
    x.np = m.nparams;
    x.donor = -1;
    s = collect(&x, rep);
    if (!s && rank == 0) s = compare(&x, rep);
    if (!s) s = fetch(&x, rep);
    free(x.send);
    free(x.all);
    free(x.arrived);
    trace_release(&x.mine);
    trace_release(&x.oracle);
    dck_model_release(&m);
    if (s && rank == 0) rep->exit_code = 2;
    return s;
}

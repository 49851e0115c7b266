/* The trainer's kernels on the GPU against their CPU twin (detcheck-gpu(7), TRAINING), stage by
 * stage, so that a difference is named: the activations of the forward pass
 * (through the activation hook), the loss, every parameter's gradient, the
 * norm, AdamW's new weights and moments. The twin itself equals the CPU
 * trainer (tests/check_train_twin.c, in CI); this program leaves only the
 * hardware to check. Needs a GPU: built by `make gpu-tests`, run by
 * ci/gpu-check.sh. Plain C; exit 0 all equal, 1 a difference, 77 no GPU. */
#include "train/train_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures, checks;

typedef struct {
    float *act;
    size_t n;
} act_copy;

static void keep_act(void *ctx, float *act, size_t n) {
    act_copy *a = ctx;
    free(a->act);
    a->act = malloc(n * sizeof(float));
    if (a->act) memcpy(a->act, act, n * sizeof(float));
    a->n = n;
}

static const char *param_at(const dck_model *m, size_t i) {
    for (size_t t = 0; t < m->nparams; t++)
        if (i >= m->params[t].offset && i < m->params[t].offset + m->params[t].numel)
            return m->params[t].name;
    return "?";
}

/* first differing element of two float arrays, -1 when equal */
static long first_diff(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (dck_f32_bits(a[i]) != dck_f32_bits(b[i])) return (long)i;
    return -1;
}

static void expect_same(const char *cfg, const char *what, const dck_model *m, const float *gpu,
                        const float *twin, size_t n, int params) {
    checks++;
    long i = first_diff(gpu, twin, n);
    if (i < 0) return;
    failures++;
    fprintf(stderr, "FAIL %s: %s differ first at element %ld%s%s: GPU %08x, twin %08x\n", cfg, what,
            i, params ? " of " : "", params ? param_at(m, (size_t)i) : "",
            dck_f32_bits(gpu[i]), dck_f32_bits(twin[i]));
}

static int run_config(const char *name, dck_train_config c) {
    dck_model m;
    dck_data *data = NULL;
    if (dck_model_init(&m, &c) || dck_data_open(&c, &data)) {
        fprintf(stderr, "%s: %s\n", name, dck_last_error());
        return 1;
    }
    size_t P = m.total, S1 = (size_t)c.seq + 1;
    float *master = calloc(P, 4), *zero = calloc(P, 4);
    float *g[2] = {calloc(P, 4), calloc(P, 4)}, *w[2] = {calloc(P, 4), calloc(P, 4)};
    float *m1[2] = {calloc(P, 4), calloc(P, 4)}, *m2[2] = {calloc(P, 4), calloc(P, 4)};
    uint16_t *tok = calloc((size_t)c.batch * S1, sizeof *tok);
    dck_model_init_weights(&m, master);
    dck_gt *gt[2] = {NULL, NULL};
    act_copy acts[2] = {{NULL, 0}, {NULL, 0}};
    float loss[2] = {0, 0}, sumsq[2] = {0, 0};
    int rc = 0;
    for (int k = 0; k < 2 && !rc; k++) {
        /* DCK_CHECK_TRAIN_GPU_SELF=1: twin against twin (the harness itself) */
        snprintf(c.device, sizeof c.device, "%s", k || getenv("DCK_CHECK_TRAIN_GPU_SELF") ? "twin" : "cuda");
        m.cfg = c;
        char note[256];
        if (dck_train_device_open(&m, 0, 1, 0, P, &gt[k], note, sizeof note) || !gt[k]) {
            fprintf(stderr, "%s: %s: %s\n", name, c.device, dck_last_error());
            rc = 1;
            break;
        }
        dck_gt_set_activation_hook(gt[k], keep_act, &acts[k]);
        dck_status s = dck_gt_upload_state(gt[k], master, zero, zero);
        for (int step = 1; step <= 2 && !s; step++) {
            for (size_t b = 0; b < (size_t)c.batch; b++)
                dck_data_sample(data, (uint64_t)step * 1000 + b, tok + b * S1);
            if (!s) s = dck_gt_microbatch(gt[k], 0, tok, &loss[k]);
            if (!s) s = dck_gt_grad_io(gt[k], 0, g[k], DCK_TK_D2H);
            if (!s) s = dck_gt_scale_sumsq(gt[k], 0.5f, &sumsq[k]);
            dck_tm_adamw a = dck_adamw_consts(&c, step, 1e-3f, 0.9f);
            if (!s) s = dck_gt_adamw(gt[k], &a);
            if (!s) s = dck_gt_refresh_weights(gt[k]);
            if (!s) s = dck_gt_download_state(gt[k], w[k], m1[k], m2[k]);
        }
        if (s) {
            fprintf(stderr, "%s: %s: %s\n", name, c.device, dck_last_error());
            rc = 1;
        }
    }
    if (!rc) {
        /* both ran two steps from the same state: the second step's stages */
        checks++;
        if (dck_f32_bits(loss[0]) != dck_f32_bits(loss[1])) {
            failures++;
            fprintf(stderr, "FAIL %s: loss GPU %08x, twin %08x\n", name, dck_f32_bits(loss[0]),
                    dck_f32_bits(loss[1]));
        }
        if (acts[0].n == acts[1].n && acts[0].act && acts[1].act)
            expect_same(name, "activations (forward pass, the device layout)", &m, acts[0].act,
                        acts[1].act, acts[0].n, 0);
        expect_same(name, "gradients", &m, g[0], g[1], P, 1);
        checks++;
        if (dck_f32_bits(sumsq[0]) != dck_f32_bits(sumsq[1])) {
            failures++;
            fprintf(stderr, "FAIL %s: sum of squares GPU %08x, twin %08x\n", name,
                    dck_f32_bits(sumsq[0]), dck_f32_bits(sumsq[1]));
        }
        expect_same(name, "master weights after AdamW", &m, w[0], w[1], P, 1);
        expect_same(name, "exp_avg", &m, m1[0], m1[1], P, 1);
        expect_same(name, "exp_avg_sq", &m, m2[0], m2[1], P, 1);
    }
    for (int k = 0; k < 2; k++) {
        dck_gt_free(gt[k]);
        free(acts[k].act);
        free(g[k]);
        free(w[k]);
        free(m1[k]);
        free(m2[k]);
    }
    free(master);
    free(zero);
    free(tok);
    dck_data_free(data);
    dck_model_release(&m);
    return rc;
}

/* Launch limits (detcheck-gpu(7), DEVICE): the dot products and a matrix product past 65535
 * row tiles in y (2,097,120 and 4,194,240 rows), cut into launches by
 * dck_tk_launch, on the GPU against the CPU's dot and chain. */
static int huge_grids(void) {
    dck_tk_backend be;
    dck_status s = getenv("DCK_CHECK_TRAIN_GPU_SELF") ? dck_tk_twin_backend(&be)
                                                      : dck_tk_cuda_backend(-1, &be);
    if (s) {
        fprintf(stderr, "huge grids: %s\n", dck_last_error());
        return 1;
    }
    size_t T = (size_t)DCK_TK_GRID_YZ_MAX * DCK_TK_DOT_T + 37, n = 3;
    size_t R = (size_t)DCK_TK_GRID_YZ_MAX * DCK_TK_MM_T + 70, K = 2;
    float *A = malloc(R * K * 4), *B = malloc(4 * 4), *C = malloc(R * 4), bias = 0.25f;
    float *dA = NULL, *dB = NULL, *dC = NULL, *dbias = NULL;
    if (!A || !B || !C) s = DCK_ERR_NOMEM;
    for (size_t i = 0; !s && i < R * K; i++) A[i] = (float)(i % 1000) * 0.001f - 0.5f;
    if (!s) B[0] = 0.75f, B[1] = -1.25f, B[2] = 0.375f, B[3] = 3.0f;
    if (!s) s = be.alloc(be.ctx, R * K * 4, (void **)&dA);
    if (!s) s = be.alloc(be.ctx, 4 * 4, (void **)&dB);
    if (!s) s = be.alloc(be.ctx, R * 4, (void **)&dC);
    if (!s) s = be.alloc(be.ctx, 4, (void **)&dbias);
    if (!s) s = be.copy(be.ctx, dA, A, R * K * 4, DCK_TK_H2D);
    if (!s) s = be.copy(be.ctx, dB, B, 4 * 4, DCK_TK_H2D);
    if (!s) s = be.copy(be.ctx, dbias, &bias, 4, DCK_TK_H2D);
    if (!s) {
        /* C[t] = dot8(A + t n, B, n) over T > 65535 * 32 rows */
        dck_tk_dots_args a = {dA, n, dB, n, dC, 1, T, 1, n};
        s = dck_tk_launch(&be, DCK_TK_dots, &a, sizeof a,
                          (dck_tk_blocks){1, (T + DCK_TK_DOT_T - 1) / DCK_TK_DOT_T, 1});
    }
    if (!s) s = be.copy(be.ctx, C, dC, T * 4, DCK_TK_D2H);
    if (!s) s = be.sync(be.ctx);
    checks++;
    for (size_t t = 0; !s && t < T; t++)
        if (dck_f32_bits(C[t]) != dck_f32_bits(dck_dot(A + t * n, B, n))) {
            failures++;
            fprintf(stderr, "FAIL huge grids: dots row %zu of %zu: GPU %08x, CPU %08x\n", t, T,
                    dck_f32_bits(C[t]), dck_f32_bits(dck_dot(A + t * n, B, n)));
            break;
        }
    if (!s) {
        /* C[r] = (bias + A[r][0] B[0]) + A[r][1] B[1] over R > 65535 * 64 rows */
        dck_tk_mm_args a = {dA, K, 1, dB, 1, dbias, 0, dC, 1, R, 1, K, 1};
        s = dck_tk_launch(&be, DCK_TK_mm, &a, sizeof a,
                          (dck_tk_blocks){1, (R + DCK_TK_MM_T - 1) / DCK_TK_MM_T, 1});
    }
    if (!s) s = be.copy(be.ctx, C, dC, R * 4, DCK_TK_D2H);
    if (!s) s = be.sync(be.ctx);
    checks++;
    for (size_t r = 0; !s && r < R; r++) {
        float want = (bias + A[r * K] * B[0]) + A[r * K + 1] * B[1];
        if (dck_f32_bits(C[r]) != dck_f32_bits(want)) {
            failures++;
            fprintf(stderr, "FAIL huge grids: product row %zu of %zu: GPU %08x, CPU %08x\n", r, R,
                    dck_f32_bits(C[r]), dck_f32_bits(want));
            break;
        }
    }
    if (s) fprintf(stderr, "huge grids: %s\n", dck_last_error());
    if (be.release) {
        be.release(be.ctx, dA);
        be.release(be.ctx, dB);
        be.release(be.ctx, dC);
        be.release(be.ctx, dbias);
    }
    if (be.destroy) be.destroy(be.ctx);
    free(A);
    free(B);
    free(C);
    return s ? 1 : 0;
}

int main(void) {
    int n = 0;
    if (!getenv("DCK_CHECK_TRAIN_GPU_SELF") && dck_gpu_device_count(&n) != DCK_OK) {
        printf("check_train_gpu: skipped: %s\n", dck_last_error());
        return 77;
    }
    static const struct {
        const char *name;
        int vocab, layers, width, heads, seq, batch, bf16;
    } cfgs[] = {
        {"tiny fp32", 256, 2, 64, 4, 32, 1, 0},     {"tiny bf16", 256, 2, 64, 4, 32, 1, 1},
        {"odd shape", 301, 3, 36, 3, 19, 3, 0},     {"odd shape bf16", 97, 1, 130, 5, 70, 2, 1},
        {"wide", 1000, 2, 256, 8, 128, 4, 0},
    };
    int trouble = 0;
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        dck_train_config c;
        dck_train_config_init(&c);
        c.vocab = cfgs[i].vocab;
        c.layers = cfgs[i].layers;
        c.width = cfgs[i].width;
        c.heads = cfgs[i].heads;
        c.seq = cfgs[i].seq;
        c.batch = cfgs[i].batch;
        c.precision = cfgs[i].bf16 ? DCK_PREC_BF16 : DCK_PREC_FP32;
        trouble |= run_config(cfgs[i].name, c);
    }
    {
        /* every kernel's origin: each launch cut to at most 3 x 2 x 2 blocks
         * (on the GPU and the twin alike) */
        dck_train_config c;
        dck_train_config_init(&c);
        c.seq = 70;
        dck_tk_set_launch_limits((dck_tk_limits){3, 2});
        trouble |= run_config("tiny, launches cut to 3 x 2 x 2 blocks", c);
        dck_tk_set_launch_limits((dck_tk_limits){DCK_TK_GRID_X_MAX, DCK_TK_GRID_YZ_MAX});
    }
    trouble |= huge_grids();
    printf("check_train_gpu: %d checks, %d failed%s\n", checks, failures,
           trouble ? ", and a run could not be made" : "");
    return failures || trouble ? 1 : 0;
}

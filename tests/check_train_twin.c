/* The CPU twin of the trainer's GPU kernels (src/gpu/train_twin.c running the
 * phases of src/gpu/gpu_train_kernels.h with cuda/train.cu's tiles and
 * launches, driven by src/gpu/gpu_train.c exactly as on a GPU): every step's
 * loss, gradient norm and root bit-equal to the CPU trainer for fp32 and
 * bf16, shapes off every tile edge, several sequences per microbatch,
 * resumes across the two paths; and kernel by kernel, the tiled matrix
 * product, the 8-lane dot products and the norm against the CPU's orders.
 * Needs no GPU: only the hardware is left to ci/gpu-check.sh. */
#include "testutil.h"
#include "gpu/gpu_train.h"
#include "train/train.h"

#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t rnd(void) {
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return (uint32_t)(z ^ (z >> 31));
}
static float rndf(void) { return ((float)(rnd() >> 8) / 16777216.0f - 0.5f) * 2.0f; }

/* ------------------------------------------------------------------ whole runs */

typedef struct {
    dck_train_step_info s[64];
    int n;
} traj;

static void on_step(void *ctx, const dck_train_step_info *s) {
    traj *t = ctx;
    if (t->n < 64) t->s[t->n++] = *s;
}

static void run(dck_train_config c, const char *device, traj *t) {
    snprintf(c.device, sizeof c.device, "%s", device);
    dck_train_hooks h = {.ctx = t, .on_step = on_step};
    dck_train_result r;
    t->n = 0;
    ck_assert_msg(dck_train_run(&c, NULL, &h, &r) == DCK_OK, "%s: %s", device, dck_last_error());
}

static void same_trajectory(const traj *a, const traj *b, const char *what) {
    ck_assert_int_eq(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        const dck_train_step_info *x = &a->s[i], *y = &b->s[i];
        ck_assert_msg(dck_f32_bits(x->loss) == dck_f32_bits(y->loss) &&
                          dck_f32_bits(x->grad_norm) == dck_f32_bits(y->grad_norm) &&
                          x->has_root == y->has_root &&
                          (!x->has_root || !memcmp(&x->root, &y->root, sizeof x->root)),
                      "%s: step %ld: loss %08x / %08x, grad norm %08x / %08x", what, x->step,
                      dck_f32_bits(x->loss), dck_f32_bits(y->loss), dck_f32_bits(x->grad_norm),
                      dck_f32_bits(y->grad_norm));
    }
}

static dck_train_config small_cfg(void) {
    dck_train_config c;
    dck_train_config_init(&c);
    c.vocab = 40;
    c.layers = 2;
    c.width = 24;
    c.heads = 3;
    c.seq = 10;
    c.batch = 2;
    c.microbatches = 4;
    c.steps = 4;
    c.warmup = 2;
    return c;
}

/* The default run (llm.c's dims), fp32 and bf16: every step. */
START_TEST(twin_default_run_equals_cpu) {
    for (int bf16 = 0; bf16 < 2; bf16++) {
        dck_train_config c;
        dck_train_config_init(&c);
        c.steps = 6;
        c.precision = bf16 ? DCK_PREC_BF16 : DCK_PREC_FP32;
        traj a, b;
        run(c, "cpu", &a);
        run(c, "twin", &b);
        same_trajectory(&a, &b, bf16 ? "default bf16" : "default fp32");
    }
}
END_TEST

/* Shapes off every edge: widths not a multiple of 8 (the lanes) nor of 64
 * (the tiles), odd heads, sequences past one tile, a vocabulary past the
 * 256-thread blocks, one layer and several, one sequence and several. */
START_TEST(twin_odd_shapes_equal_cpu) {
    static const int shapes[][7] = {
        /* vocab, layers, width, heads, seq, batch, microbatches */
        {40, 2, 24, 3, 10, 2, 4},   {301, 1, 36, 3, 19, 3, 2}, {97, 1, 130, 5, 70, 1, 1},
        {517, 1, 8, 1, 3, 2, 2},    {33, 3, 12, 4, 17, 1, 8},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
        for (int bf16 = 0; bf16 < 2; bf16++) {
            dck_train_config c = small_cfg();
            c.vocab = shapes[k][0];
            c.layers = shapes[k][1];
            c.width = shapes[k][2];
            c.heads = shapes[k][3];
            c.seq = shapes[k][4];
            c.batch = shapes[k][5];
            c.microbatches = shapes[k][6];
            c.steps = 3;
            c.precision = bf16 ? DCK_PREC_BF16 : DCK_PREC_FP32;
            traj a, b;
            run(c, "cpu", &a);
            run(c, "twin", &b);
            char what[96];
            snprintf(what, sizeof what, "shape %zu %s", k, bf16 ? "bf16" : "fp32");
            same_trajectory(&a, &b, what);
        }
}
END_TEST

/* Fast mode on the device path: split-K accumulation of the weight
 * gradients (atomics on a GPU) sums in another order, so its bits differ
 * from the deterministic run's. */
START_TEST(twin_fast_mode_differs) {
    dck_train_config c = small_cfg();
    traj a, b;
    run(c, "twin", &a);
    c.mode = DCK_MODE_FAST;
    run(c, "twin", &b);
    int differ = 0;
    for (int i = 0; i < a.n; i++)
        differ |= dck_f32_bits(a.s[i].grad_norm) != dck_f32_bits(b.s[i].grad_norm) ||
                  memcmp(&a.s[i].root, &b.s[i].root, sizeof a.s[i].root) != 0;
    ck_assert_msg(differ, "fast mode gave the deterministic bits");
}
END_TEST

/* A checkpoint moves between the paths: CPU to step 2, the twin to step 4,
 * and the reverse, against one run on each. */
START_TEST(twin_resume_across_devices) {
    char dir[] = "/tmp/dck_twin_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    for (int first_cpu = 0; first_cpu < 2; first_cpu++) {
        dck_train_config c = small_cfg();
        c.decay_steps = 4;
        c.decay_set = true;
        traj whole, a, b;
        run(c, first_cpu ? "twin" : "cpu", &whole);
        snprintf(c.out, sizeof c.out, "%s/run%d", dir, first_cpu);
        c.steps = 2;
        run(c, first_cpu ? "cpu" : "twin", &a);
        c.steps = 4;
        c.resume = true;
        run(c, first_cpu ? "twin" : "cpu", &b);
        ck_assert_int_eq(b.n, 2);
        traj tail = whole;
        memmove(tail.s, tail.s + 2, 2 * sizeof tail.s[0]);
        tail.n = 2;
        same_trajectory(&tail, &b, first_cpu ? "cpu -> twin" : "twin -> cpu");
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* The taps of detcheck canary (train_inject.c) on the device path: weights
 * before the step, gradients after the backward pass and the moments after
 * the update are brought to the host and back, so a bit flipped there has
 * the CPU's effect, step for step; the activation tap runs between forward
 * and backward (its layout is the device's: it must change the run). */
typedef struct {
    dck_tap_point what;
    long step;
    size_t index;
    int calls;
} flip_tap;

static void flip_on_state(void *ctx, const dck_model *m, dck_tap_point what, long step, float *data,
                          size_t lo, size_t hi) {
    (void)m;
    flip_tap *f = ctx;
    if (what != f->what || step != f->step || f->index < lo || f->index >= hi) return;
    f->calls++;
    float *x = &data[f->index - lo];
    *x = dck_f32_from_bits(dck_f32_bits(*x) ^ 0x00400000u);
}

static void run_tapped(dck_train_config c, const char *device, flip_tap *f, traj *t) {
    snprintf(c.device, sizeof c.device, "%s", device);
    dck_train_tap tap = {.ctx = f, .on_state = flip_on_state};
    dck_train_hooks h = {.ctx = t, .on_step = on_step, .tap = &tap};
    dck_train_result r;
    t->n = 0;
    f->calls = 0;
    ck_assert_msg(dck_train_run(&c, NULL, &h, &r) == DCK_OK, "%s: %s", device, dck_last_error());
}

START_TEST(twin_taps_as_on_the_cpu) {
    dck_train_config c = small_cfg();
    traj clean, a, b;
    run(c, "twin", &clean);
    static const dck_tap_point points[] = {DCK_TAP_WEIGHTS, DCK_TAP_GRADIENTS, DCK_TAP_EXP_AVG,
                                           DCK_TAP_EXP_AVG_SQ};
    for (size_t k = 0; k < sizeof points / sizeof points[0]; k++) {
        flip_tap f = {points[k], 2, 123, 0};
        run_tapped(c, "cpu", &f, &a);
        ck_assert_int_eq(f.calls, 1);
        run_tapped(c, "twin", &f, &b);
        ck_assert_int_eq(f.calls, 1);
        same_trajectory(&a, &b, "tapped");
        ck_assert_msg(memcmp(&clean.s[1].root, &b.s[1].root, sizeof b.s[1].root) != 0,
                      "tap point %d: the flipped bit changed nothing", (int)points[k]);
    }
    flip_tap f = {DCK_TAP_ACTIVATIONS, 2, 5, 0};
    run_tapped(c, "twin", &f, &b);
    ck_assert_int_ge(f.calls, 1);
    ck_assert_msg(memcmp(&clean.s[1].root, &b.s[1].root, sizeof b.s[1].root) != 0,
                  "the activation tap changed nothing");
}
END_TEST

/* ------------------------------------------------------------------ non-finite values */

/* A NaN put into the state at a tap point: the run must stop (the rule
 * of detcheck-train(1), NON-FINITE VALUES) at the same step with the same message on the CPU and the twin, and
 * report the same steps before it. */
typedef struct {
    dck_tap_point what;
    long step;
    const char *tensor; /* NaN at element `index` of it */
    size_t index;
    int calls;
} nan_tap;

static void nan_on_state(void *ctx, const dck_model *m, dck_tap_point what, long step, float *data,
                         size_t lo, size_t hi) {
    nan_tap *f = ctx;
    if (what != f->what || step != f->step) return;
    long t = dck_model_find(m, f->tensor);
    ck_assert_int_ge(t, 0);
    size_t i = m->params[t].offset + f->index;
    if (i < lo || i >= hi) return;
    f->calls++;
    data[i - lo] = dck_f32_from_bits(0x7fc00000u);
}

static void run_nan(dck_train_config c, const char *device, nan_tap *f, traj *t, char *msg,
                    size_t n) {
    snprintf(c.device, sizeof c.device, "%s", device);
    dck_train_tap tap = {.ctx = f, .on_state = nan_on_state};
    dck_train_hooks h = {.ctx = t, .on_step = on_step, .tap = &tap};
    dck_train_result r;
    t->n = 0;
    f->calls = 0;
    dck_status s = dck_train_run(&c, NULL, &h, &r);
    ck_assert_msg(s == DCK_ERR_LIMIT, "%s: a NaN did not stop the run (status %d)", device, (int)s);
    snprintf(msg, n, "%s", dck_last_error());
}

START_TEST(twin_nonfinite_stops_as_the_cpu) {
    static const struct {
        nan_tap tap;
        const char *want;
    } cases[] = {
        /* a NaN weight: the loss of that step */
        {{DCK_TAP_WEIGHTS, 3, "model.lm_head.weight", 7, 0}, "step 3: the loss is NaN;"},
        /* a NaN gradient element: named, with its tensor */
        {{DCK_TAP_GRADIENTS, 2, "model.blocks.1.mlp.fc.weight", 123, 0},
         "step 2: the gradient of model.blocks.1.mlp.fc.weight is NaN at element 123;"},
        /* a NaN second moment: the next update makes its weight NaN */
        {{DCK_TAP_EXP_AVG, 2, "model.wpe.weight", 30, 0},
         "step 3: the AdamW update made model.wpe.weight not finite at element 30;"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int bf16 = 0; bf16 < 2; bf16++) {
            dck_train_config c = small_cfg();
            c.steps = 5;
            c.precision = bf16 ? DCK_PREC_BF16 : DCK_PREC_FP32;
            nan_tap f = cases[k].tap;
            traj a, b;
            char ma[1024], mb[1024];
            run_nan(c, "cpu", &f, &a, ma, sizeof ma);
            ck_assert_int_ge(f.calls, 1);
            run_nan(c, "twin", &f, &b, mb, sizeof mb);
            ck_assert_int_ge(f.calls, 1);
            ck_assert_msg(strstr(ma, cases[k].want), "case %zu bf16 %d: %s / twin: %s", k, bf16, ma, mb);
            ck_assert_str_eq(ma, mb);
            ck_assert_int_eq(a.n, (int)f.step - (k == 2 ? 0 : 1));
            same_trajectory(&a, &b, "before the NaN");
        }
}
END_TEST

/* ------------------------------------------------------------------ launch geometry */

/* The cut of a logical grid into launches: every launch within the limits,
 * aligned on them, inside the grid, and together exactly the grid (their
 * volumes add up to it), for the shapes the options allow: up to 2^33
 * tokens a microbatch (--batch 2^20, --seq 8192), without memory. */
static void check_cut(dck_tk_blocks b, dck_tk_limits lim) {
    uint64_t n = dck_tk_launch_count(b, lim);
    ck_assert_uint_gt(n, 0);
    unsigned __int128 volume = 0;
    for (uint64_t i = 0; i < n; i++) {
        dck_tk_grid g = dck_tk_launch_piece(b, lim, i);
        ck_assert(g.x >= 1 && g.x <= lim.x && g.y >= 1 && g.y <= lim.yz && g.z >= 1 && g.z <= lim.yz);
        ck_assert(g.at.x % lim.x == 0 && g.at.y % lim.yz == 0 && g.at.z % lim.yz == 0);
        ck_assert((uint64_t)g.at.x + g.x <= b.x && (uint64_t)g.at.y + g.y <= b.y &&
                  (uint64_t)g.at.z + g.z <= b.z);
        /* a short launch only at the grid's end */
        ck_assert(g.x == lim.x || g.at.x + g.x == b.x);
        ck_assert(g.y == lim.yz || g.at.y + g.y == b.y);
        volume += (unsigned __int128)g.x * g.y * g.z;
    }
    ck_assert(volume == (unsigned __int128)b.x * b.y * b.z);
}

START_TEST(launch_geometry_covers_huge_grids) {
    dck_tk_limits cuda = {DCK_TK_GRID_X_MAX, DCK_TK_GRID_YZ_MAX};
    uint64_t N = (uint64_t)1 << 33; /* tokens: --batch 1048576 --seq 8192 */
    /* the dots of dX = dY W^T (32 x 32 tiles), width 8192 */
    check_cut((dck_tk_blocks){8192 / DCK_TK_DOT_T, N / DCK_TK_DOT_T, 1}, cuda);
    ck_assert_uint_eq(dck_tk_launch_count((dck_tk_blocks){256, N / 32, 1}, cuda), 4097);
    /* a forward product (64 x 64 tiles), vocab 65536; fast mode's split in z */
    check_cut((dck_tk_blocks){65536 / DCK_TK_MM_T, N / DCK_TK_MM_T, 8}, cuda);
    /* where the y limit starts: 65535 tiles of 32 rows, one more row */
    ck_assert_uint_eq(dck_tk_launch_count((dck_tk_blocks){1, 65535, 1}, cuda), 1);
    ck_assert_uint_eq(dck_tk_launch_count((dck_tk_blocks){1, (2097120 + 1 + 31) / 32, 1}, cuda), 2);
    /* one block per attention row and per token, past 2^31 - 1 in x */
    check_cut((dck_tk_blocks){3000000000u, 1, 1}, cuda);
    check_cut((dck_tk_blocks){UINT32_MAX, UINT32_MAX, 3}, (dck_tk_limits){DCK_TK_GRID_X_MAX, 1u << 15});
    /* small limits, as the twin run below uses them */
    check_cut((dck_tk_blocks){7, 5, 3}, (dck_tk_limits){3, 2});
    /* beyond any launch: refused, not cut wrong */
    ck_assert_uint_eq(dck_tk_launch_count((dck_tk_blocks){(uint64_t)UINT32_MAX + 1, 1, 1}, cuda), 0);
    ck_assert_uint_eq(dck_tk_launch_count((dck_tk_blocks){1, 0, 1}, cuda), 0);
}
END_TEST

/* The twin refuses what the hardware refuses; through the launcher, the
 * dots and the product run past 65535 row tiles (2,097,120 and 4,194,240
 * rows) and every row of the last launches has its own output. */
START_TEST(twin_launches_past_65535_blocks) {
    dck_tk_backend be;
    ck_assert_int_eq(dck_tk_twin_backend(&be), DCK_OK);
    float one = 1.0f;
    dck_tk_dots_args bad = {&one, 1, &one, 1, &one, 1, 1, 1, 1};
    ck_assert_int_eq(dck_tk_twin_launch(DCK_TK_dots, &bad, (dck_tk_grid){.x = 1, .y = 65536, .z = 1}),
                     DCK_ERR_LIMIT);
    ck_assert_int_eq(dck_tk_twin_launch(DCK_TK_dots, &bad, (dck_tk_grid){.x = 1, .y = 0, .z = 1}),
                     DCK_ERR_LIMIT);
    {
        size_t T = (size_t)DCK_TK_GRID_YZ_MAX * DCK_TK_DOT_T + 37, n = 3;
        float *A = malloc(T * n * 4), *B = malloc(n * 4), *C = malloc(T * 4);
        ck_assert(A && B && C);
        for (size_t i = 0; i < T * n; i++) A[i] = (float)(i % 1000) * 0.001f - 0.5f;
        for (size_t i = 0; i < n; i++) B[i] = rndf();
        for (size_t i = 0; i < T; i++) C[i] = -1.0f;
        dck_tk_dots_args a = {A, n, B, n, C, 1, T, 1, n};
        ck_assert_int_eq(dck_tk_launch(&be, DCK_TK_dots, &a, sizeof a,
                                       (dck_tk_blocks){1, (T + DCK_TK_DOT_T - 1) / DCK_TK_DOT_T, 1}),
                         DCK_OK);
        for (size_t t = 0; t < T; t++)
            ck_assert_msg(dck_f32_bits(C[t]) == dck_f32_bits(dck_dot(A + t * n, B, n)), "row %zu", t);
        free(A);
        free(B);
        free(C);
    }
    {
        size_t R = (size_t)DCK_TK_GRID_YZ_MAX * DCK_TK_MM_T + 70, K = 2;
        float *A = malloc(R * K * 4), *B = malloc(K * 4), *C = malloc(R * 4), bias = 0.25f;
        ck_assert(A && B && C);
        for (size_t i = 0; i < R * K; i++) A[i] = (float)(i % 777) * 0.003f - 1.0f;
        B[0] = rndf();
        B[1] = rndf();
        for (size_t i = 0; i < R; i++) C[i] = -1.0f;
        dck_tk_mm_args a = {A, K, 1, B, 1, &bias, 0, C, 1, R, 1, K, 1};
        ck_assert_int_eq(dck_tk_launch(&be, DCK_TK_mm, &a, sizeof a,
                                       (dck_tk_blocks){1, (R + DCK_TK_MM_T - 1) / DCK_TK_MM_T, 1}),
                         DCK_OK);
        for (size_t r = 0; r < R; r++) {
            float want = (bias + A[r * K] * B[0]) + A[r * K + 1] * B[1];
            ck_assert_msg(dck_f32_bits(C[r]) == dck_f32_bits(want), "row %zu", r);
        }
        free(A);
        free(B);
        free(C);
    }
}
END_TEST

/* Every launch of a training step cut into many (at most 3 blocks in x, 2
 * in y and z): the twin, on those launches and origins, still gives the
 * CPU's bits, so every kernel honours its origin. */
START_TEST(twin_run_cut_into_small_launches_equals_cpu) {
    for (int bf16 = 0; bf16 < 2; bf16++) {
        dck_train_config c = small_cfg();
        c.steps = 2;
        c.seq = 70; /* 3 row tiles of 64 in the products, 5 of 32 in the dots */
        c.precision = bf16 ? DCK_PREC_BF16 : DCK_PREC_FP32;
        traj a, b;
        run(c, "cpu", &a);
        dck_tk_set_launch_limits((dck_tk_limits){3, 2});
        run(c, "twin", &b);
        dck_tk_set_launch_limits((dck_tk_limits){DCK_TK_GRID_X_MAX, DCK_TK_GRID_YZ_MAX});
        same_trajectory(&a, &b, bf16 ? "small launches bf16" : "small launches fp32");
    }
    dck_tk_limits lim = dck_tk_launch_limits();
    ck_assert_uint_eq(lim.x, DCK_TK_GRID_X_MAX);
    ck_assert_uint_eq(lim.yz, DCK_TK_GRID_YZ_MAX);
}
END_TEST

/* ------------------------------------------------------------------ kernels */

/* The tiled product against the chain it must equal, at sizes around the
 * 64-output tiles and the 16-deep k slices, from a bias, from +0, and
 * accumulating into C. */
START_TEST(twin_mm_is_the_chain) {
    static const size_t sizes[][3] = {{1, 1, 1},   {3, 70, 17},  {64, 64, 16}, {65, 63, 33},
                                      {130, 5, 1}, {7, 129, 64}, {2, 3, 100}};
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
        for (int mode = 0; mode < 3; mode++) {
            size_t R = sizes[z][0], N = sizes[z][1], K = sizes[z][2];
            float *A = malloc(R * K * 4), *B = malloc(K * N * 4), *bias = malloc(N * 4),
                  *C = malloc(R * N * 4), *want = malloc(R * N * 4);
            for (size_t i = 0; i < R * K; i++) A[i] = rndf();
            for (size_t i = 0; i < K * N; i++) B[i] = rndf();
            for (size_t i = 0; i < N; i++) bias[i] = rndf();
            for (size_t i = 0; i < R * N; i++) C[i] = want[i] = rndf();
            for (size_t r = 0; r < R; r++)
                for (size_t n = 0; n < N; n++) {
                    float acc = mode == 0 ? bias[n] : mode == 1 ? 0.0f : want[r * N + n];
                    for (size_t k = 0; k < K; k++) acc = acc + A[r * K + k] * B[k * N + n];
                    want[r * N + n] = acc;
                }
            dck_tk_mm_args a = {A, K, 1, B, N, mode == 0 ? bias : mode == 1 ? NULL : C,
                                mode == 0 ? 0 : N, C, N, R, N, K, 1};
            dck_tk_grid g = {.x = (uint32_t)((N + 63) / 64), .y = (uint32_t)((R + 63) / 64), .z = 1};
            ck_assert_int_eq(dck_tk_twin_launch(DCK_TK_mm, &a, g), DCK_OK);
            for (size_t i = 0; i < R * N; i++)
                ck_assert_msg(dck_f32_bits(C[i]) == dck_f32_bits(want[i]),
                              "%zux%zux%zu mode %d: output %zu %08x, chain %08x", R, N, K, mode, i,
                              dck_f32_bits(C[i]), dck_f32_bits(want[i]));
            free(A);
            free(B);
            free(bias);
            free(C);
            free(want);
        }
}
END_TEST

/* The tiled dot products against dck_dot (8 lanes), at lengths around the
 * 32-wide j slices and grids around the 32 x 32 blocks of 2 x 2 outputs. */
START_TEST(twin_dots_are_dck_dot) {
    static const size_t sizes[][3] = {{1, 1, 1},  {17, 3, 31}, {16, 16, 32}, {5, 33, 65},
                                      {2, 2, 200}, {33, 31, 9}, {64, 65, 40}};
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        size_t T = sizes[z][0], I = sizes[z][1], n = sizes[z][2];
        float *A = malloc(T * n * 4), *B = malloc(I * n * 4), *C = malloc(T * I * 4);
        for (size_t i = 0; i < T * n; i++) A[i] = rndf();
        for (size_t i = 0; i < I * n; i++) B[i] = rndf();
        dck_tk_dots_args a = {A, n, B, n, C, I, T, I, n};
        dck_tk_grid g = {.x = (uint32_t)((I + DCK_TK_DOT_T - 1) / DCK_TK_DOT_T),
                         .y = (uint32_t)((T + DCK_TK_DOT_T - 1) / DCK_TK_DOT_T), .z = 1};
        ck_assert_int_eq(dck_tk_twin_launch(DCK_TK_dots, &a, g), DCK_OK);
        for (size_t t = 0; t < T; t++)
            for (size_t i = 0; i < I; i++)
                ck_assert_msg(dck_f32_bits(C[t * I + i]) == dck_f32_bits(dck_dot(A + t * n, B + i * n, n)),
                              "%zux%zu n %zu: (%zu, %zu)", T, I, n, t, i);
        free(A);
        free(B);
        free(C);
    }
}
END_TEST

/* The norm's lanes and chunks against dck_sumsq, around the 4096 chunks. */
START_TEST(twin_sumsq_is_dck_sumsq) {
    static const size_t lens[] = {1, 7, 8, 4095, 4096, 4097, 12345, 40000};
    for (size_t z = 0; z < sizeof lens / sizeof lens[0]; z++) {
        size_t n = lens[z], chunks = (n + 4095) / 4096;
        float *g = malloc(n * 4), *lanes = malloc(chunks * 8 * 4), out = 0;
        for (size_t i = 0; i < n; i++) g[i] = rndf();
        dck_tk_sumsq_args a = {g, n, lanes, &out};
        dck_tk_grid gr = {.x = (uint32_t)((chunks * 8 + 255) / 256), .y = 1, .z = 1};
        ck_assert_int_eq(dck_tk_twin_launch(DCK_TK_sumsq_lanes, &a, gr), DCK_OK);
        ck_assert_int_eq(dck_tk_twin_launch(DCK_TK_sumsq_final, &a, (dck_tk_grid){.x = 1, .y = 1, .z = 1}), DCK_OK);
        ck_assert_msg(dck_f32_bits(out) == dck_f32_bits(dck_sumsq(g, n)), "n %zu", n);
        free(g);
        free(lanes);
    }
}
END_TEST

/* The shared scalar functions are the CPU's (train_math.c wraps them; the
 * vector paths must give the same bits). */
START_TEST(shared_math_is_the_cpu_math) {
    for (int i = 0; i < 200000; i++) {
        float x = dck_f32_from_bits(rnd());
        if (x != x) continue;
        float y[8], s[8], e[8];
        for (int k = 0; k < 8; k++) e[k] = x * (float)(k + 1) * 1e-3f;
        float e0[8];
        memcpy(e0, e, sizeof e);
        dck_expf_n(e, 8);
        for (int k = 0; k < 8; k++)
            ck_assert_uint_eq(dck_f32_bits(e[k]), dck_f32_bits(dck_tm_expf(e0[k])));
        dck_gelu_n(e0, y, s, 8);
        for (int k = 0; k < 8; k++) {
            ck_assert_uint_eq(dck_f32_bits(y[k]), dck_f32_bits(dck_tm_gelu(e0[k])));
            ck_assert_uint_eq(dck_f32_bits(s[k]), dck_f32_bits(dck_tm_gelu_sig(e0[k])));
        }
        memcpy(y, e0, sizeof y);
        dck_bf16_round_n(y, 8);
        for (int k = 0; k < 8; k++) ck_assert_uint_eq(dck_f32_bits(y[k]), dck_f32_bits(dck_tm_bf16_round(e0[k])));
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("train_twin");
    TCase *tc = tcase_create("twin");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, twin_default_run_equals_cpu);
    tcase_add_test(tc, twin_odd_shapes_equal_cpu);
    tcase_add_test(tc, twin_fast_mode_differs);
    tcase_add_test(tc, twin_resume_across_devices);
    tcase_add_test(tc, twin_taps_as_on_the_cpu);
    tcase_add_test(tc, twin_nonfinite_stops_as_the_cpu);
    tcase_add_test(tc, launch_geometry_covers_huge_grids);
    tcase_add_test(tc, twin_launches_past_65535_blocks);
    tcase_add_test(tc, twin_run_cut_into_small_launches_equals_cpu);
    tcase_add_test(tc, twin_mm_is_the_chain);
    tcase_add_test(tc, twin_dots_are_dck_dot);
    tcase_add_test(tc, twin_sumsq_is_dck_sumsq);
    tcase_add_test(tc, shared_math_is_the_cpu_math);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

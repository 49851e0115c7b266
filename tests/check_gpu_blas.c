/* The fast baseline's host logic (src/gpu/gpu_blas.c), without a GPU: the
 * trainer's row-major products mapped to cublasSgemm's column-major
 * arguments give, through a reference GEMM with cuBLAS's semantics, the
 * products the trainer computes (gpu_train.c: Y = X W, dX = dY W^T,
 * dW += X^T dY). Odd, distinct dimensions, so that a swapped transpose or
 * leading dimension reads the wrong elements and is caught. */
#include "testutil.h"
#include "gpu/gpu_blas.h"
#include "train/train.h"

#include <math.h>
#include <stdlib.h>

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;
static float rndf(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / (double)(1ULL << 24)) - 0.5f;
}

/* row-major, the trainer's way: element (r, c) of a matrix with row stride ld */
static double rm(const float *p, size_t ld, size_t r, size_t c) { return p[r * ld + c]; }

/* elements of a column-major rows x cols matrix with leading dimension ld */
static size_t need(int rows, int cols, int ld) {
    return rows <= 0 || cols <= 0 ? 0 : (size_t)ld * (size_t)(cols - 1) + (size_t)rows;
}

/* Runs the three products of one layer through the mapping and the reference
 * and checks each against the row-major definition. swap: break the mapping
 * on purpose (the test of the test). Returns the number of wrong elements. */
static size_t check_layer(size_t T, size_t in, size_t out, int swap) {
    float *op[DCK_BLAS_OPERANDS];
    size_t n[DCK_BLAS_OPERANDS] = {T * in, in * out, T * out, T * out, T * in, in * out};
    for (int i = 0; i < DCK_BLAS_OPERANDS; i++) {
        op[i] = malloc(n[i] * sizeof(float));
        ck_assert_ptr_nonnull(op[i]);
        for (size_t j = 0; j < n[i]; j++) op[i][j] = rndf();
    }
    float *dw0 = malloc(n[DCK_BLAS_DW] * sizeof(float));
    memcpy(dw0, op[DCK_BLAS_DW], n[DCK_BLAS_DW] * sizeof(float));
    dck_blas_rm three[3];
    dck_blas_linear(T, in, out, three);
    size_t bad = 0;
    for (int p = 0; p < 3; p++) {
        dck_blas_call c;
        ck_assert_int_eq(dck_blas_from_row_major(&three[p], &c), DCK_OK);
        if (swap) {
            dck_blas_op t = c.transa;
            c.transa = c.transb;
            c.transb = t;
        }
        /* the elements each operand spans as cuBLAS would read it: a broken
         * mapping may reach past the buffer, which counts as caught */
        size_t span_a = need(c.transa == DCK_BLAS_N ? c.m : c.k, c.transa == DCK_BLAS_N ? c.k : c.m,
                             c.lda),
               span_b = need(c.transb == DCK_BLAS_N ? c.k : c.n, c.transb == DCK_BLAS_N ? c.n : c.k,
                             c.ldb),
               span_c = need(c.m, c.n, c.ldc);
        if (span_a > n[c.a] || span_b > n[c.b] || span_c > n[c.c] ||
            dck_blas_ref_sgemm(c.transa, c.transb, c.m, c.n, c.k, op[c.a], c.lda, op[c.b], c.ldb,
                               c.beta, op[c.c], c.ldc) != 0) {
            ck_assert_msg(swap, "%s: the mapping gives arguments cuBLAS refuses", three[p].what);
            bad++;
        }
    }
    const float *X = op[DCK_BLAS_X], *W = op[DCK_BLAS_W], *dY = op[DCK_BLAS_DY];
    for (size_t r = 0; r < T; r++)
        for (size_t o = 0; o < out; o++) { /* Y = X W */
            double s = 0;
            for (size_t k = 0; k < in; k++) s += rm(X, in, r, k) * rm(W, out, k, o);
            bad += fabs(rm(op[DCK_BLAS_Y], out, r, o) - s) > 1e-5 * (1 + fabs(s));
        }
    for (size_t r = 0; r < T; r++)
        for (size_t i = 0; i < in; i++) { /* dX = dY W^T */
            double s = 0;
            for (size_t k = 0; k < out; k++) s += rm(dY, out, r, k) * rm(W, out, i, k);
            bad += fabs(rm(op[DCK_BLAS_DX], in, r, i) - s) > 1e-5 * (1 + fabs(s));
        }
    for (size_t i = 0; i < in; i++)
        for (size_t o = 0; o < out; o++) { /* dW += X^T dY */
            double s = rm(dw0, out, i, o);
            for (size_t r = 0; r < T; r++) s += rm(X, in, r, i) * rm(dY, out, r, o);
            bad += fabs(rm(op[DCK_BLAS_DW], out, i, o) - s) > 1e-5 * (1 + fabs(s));
        }
    for (int i = 0; i < DCK_BLAS_OPERANDS; i++) free(op[i]);
    free(dw0);
    return bad;
}

START_TEST(row_major_products_map_to_cublas) {
    /* the trainer's layers of a small model: d = 6, vocab = 11, 5 tokens */
    size_t shapes[16][2];
    size_t ns = dck_blas_trainer_linears(2, 6, 11, shapes, 16);
    ck_assert_uint_eq(ns, 2 * 4 + 1);
    for (size_t i = 0; i < ns; i++)
        ck_assert_uint_eq(check_layer(5, shapes[i][0], shapes[i][1], 0), 0);
    ck_assert_uint_eq(check_layer(1, 3, 2, 0), 0);
    ck_assert_uint_eq(check_layer(7, 1, 9, 0), 0);
}
END_TEST

START_TEST(a_wrong_transpose_is_caught) {
    ck_assert_uint_gt(check_layer(5, 6, 18, 1), 0);
    ck_assert_uint_gt(check_layer(5, 24, 6, 1), 0);
}
END_TEST

START_TEST(trainer_shapes_match_the_flop_count) {
    /* cmd_train.c's bench counts 6 tokens (12 L d^2 + d V) FLOPs a step:
     * the products listed here must be those */
    uint32_t L = 3, d = 8, V = 13;
    size_t T = 10, shapes[32][2];
    size_t ns = dck_blas_trainer_linears(L, d, V, shapes, 32);
    double f = 0;
    for (size_t i = 0; i < ns; i++) {
        dck_blas_rm three[3];
        dck_blas_linear(T, shapes[i][0], shapes[i][1], three);
        for (int p = 0; p < 3; p++) f += 2.0 * (double)three[p].M * three[p].N * three[p].K;
    }
    ck_assert(f == 6.0 * T * (12.0 * L * d * d + (double)d * V));
}
END_TEST

START_TEST(dimensions_beyond_int_are_refused) {
    dck_blas_rm three[3];
    dck_blas_linear((size_t)1 << 32, 4, 4, three);
    dck_blas_call c;
    ck_assert_int_eq(dck_blas_from_row_major(&three[0], &c), DCK_ERR_INVALID);
}
END_TEST

START_TEST(no_cublas_is_unavailable_never_faked) {
    /* without a GPU (or CUDA) the baseline is an error saying why, with no
     * figure; DETCHECK_CUBLAS_LIB pointing nowhere says cuBLAS */
    setenv("DETCHECK_CUBLAS_LIB", "libcublas-dck-missing.so.0", 1);
    double sec = -1, fl = -1;
    dck_status s = dck_blas_cuda_bench(1, 8, 16, 4, 1, DCK_BLAS_FP32, &sec, &fl);
    if (s == DCK_OK) TU_SKIP("a GPU with cuBLAS answered: nothing to refuse here");
    ck_assert_int_eq(s, DCK_ERR_NODEVICE);
    ck_assert(sec == 0 && fl == 0);
    /* the TF32 row likewise */
    sec = fl = -1;
    ck_assert_int_eq(dck_blas_cuda_bench(1, 8, 16, 4, 1, DCK_BLAS_TF32, &sec, &fl), DCK_ERR_NODEVICE);
    unsetenv("DETCHECK_CUBLAS_LIB");
    ck_assert(sec == 0 && fl == 0);
}
END_TEST

/* ------------------------------------------------------------------ the trainer's fast mode on the mapping
 * `train --bench`'s third mode puts every linear layer's products on cuBLAS
 * (gpu_train.c: bias rows then beta 1, dX, dW accumulated). On the twin the
 * same calls go to the reference GEMM: the run must follow the deterministic
 * one closely (FP32 sums in another order), step for step, and differ from
 * it in the bits; a wrong operand, transpose or accumulation is far off. */
typedef struct {
    float loss[16], norm[16];
    int n;
} losses;
static void on_step(void *ctx, const dck_train_step_info *s) {
    losses *l = ctx;
    if (l->n < 16) l->loss[l->n] = s->loss, l->norm[l->n++] = s->grad_norm;
}
static void run_twin(dck_train_config c, int mode, int blas, losses *l) {
    c.mode = mode;
    dck_blas_fast_mode_set(blas);
    dck_train_hooks h = {.ctx = l, .on_step = on_step};
    dck_train_result r;
    l->n = 0;
    dck_status s = dck_train_run(&c, NULL, &h, &r);
    dck_blas_fast_mode_set(0);
    ck_assert_msg(s == DCK_OK, "%s", dck_last_error());
}

START_TEST(trainer_fast_mode_on_the_mapping_follows_the_deterministic_run) {
    dck_train_config c;
    dck_train_config_init(&c);
    c.vocab = 37, c.layers = 2, c.width = 24, c.heads = 3, c.seq = 9, c.batch = 2;
    c.microbatches = 2, c.steps = 6, c.digest_every = 0, c.threads = 1;
    snprintf(c.device, sizeof c.device, "twin");
    losses det, blas, blas2;
    run_twin(c, DCK_MODE_DET, 0, &det);
    run_twin(c, DCK_MODE_FAST, 1, &blas);
    ck_assert_int_eq(det.n, blas.n);
    int differ = 0;
    for (int i = 0; i < det.n; i++) {
        ck_assert_msg(fabsf(det.loss[i] - blas.loss[i]) <= 1e-4f * (1 + fabsf(det.loss[i])) &&
                          fabsf(det.norm[i] - blas.norm[i]) <= 1e-3f * (1 + fabsf(det.norm[i])),
                      "step %d: loss %.7g / %.7g, grad norm %.7g / %.7g", i + 1, det.loss[i],
                      blas.loss[i], det.norm[i], blas.norm[i]);
        differ |= det.norm[i] != blas.norm[i] || det.loss[i] != blas.loss[i];
    }
    ck_assert_msg(differ, "the reference GEMM gave the deterministic bits: was it used?");
    /* the switch is read when the run starts: off again, fast mode is the kernels' */
    run_twin(c, DCK_MODE_FAST, 0, &blas2);
    int same = 1;
    for (int i = 0; i < det.n; i++) same &= blas2.norm[i] == blas.norm[i];
    ck_assert_msg(!same, "fast mode without the switch took the GEMM path");
}
END_TEST

START_TEST(cpu_device_has_no_blas_fast_mode) {
    dck_blas_gt *b = NULL;
    ck_assert_int_eq(dck_blas_gt_open("cpu", NULL, &b), DCK_ERR_NODEVICE);
    ck_assert_ptr_null(b);
    ck_assert_int_eq(dck_blas_gt_open("twin", NULL, &b), DCK_OK);
    dck_blas_gt_close(b);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gpu_blas");
    TCase *tc = tcase_create("blas");
    tcase_add_test(tc, row_major_products_map_to_cublas);
    tcase_add_test(tc, a_wrong_transpose_is_caught);
    tcase_add_test(tc, trainer_shapes_match_the_flop_count);
    tcase_add_test(tc, dimensions_beyond_int_are_refused);
    tcase_add_test(tc, no_cublas_is_unavailable_never_faked);
    tcase_add_test(tc, trainer_fast_mode_on_the_mapping_follows_the_deterministic_run);
    tcase_add_test(tc, cpu_device_has_no_blas_fast_mode);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

/* The replica check (src/hash/replica.c): the verdict on synthetic roots and
 * digest tables (dck_replica_decide: strict majority, no culprit with two
 * replicas or without a majority), one process alone (dck_replica_check),
 * and whole checks with ranks played by threads (dck_replica_run over a
 * transport of shared memory): a flipped bit named with its tensor, another
 * tensor list and a rank that fails to digest are trouble on every rank.
 * The MPI transport with real ranks: tests/cli/test_replica.sh. */
#include "testutil.h"
#include "hash/hash.h"

#include <pthread.h>

static dck_digest D(uint64_t x) { return (dck_digest){x, ~x}; }

static void decide_case(const uint64_t *root_ids, int K, size_t n, const uint64_t *table_ids,
                        dck_replica_result *r) {
    dck_digest roots[8], table[64];
    for (int i = 0; i < K; i++) roots[i] = D(root_ids[i]);
    for (size_t i = 0; i < (size_t)K * n; i++) table[i] = D(table_ids[i]);
    memset(r, 0, sizeof *r);
    r->nranks = K;
    ck_assert_int_eq(dck_replica_decide(roots, K, table, n, r), DCK_OK);
}

static void assert_ranks(const int *got, size_t ngot, const int *want, size_t nwant) {
    ck_assert_uint_eq(ngot, nwant);
    for (size_t i = 0; i < nwant; i++) ck_assert_int_eq(got[i], want[i]);
}

START_TEST(decide_equal) {
    uint64_t roots[] = {7, 7, 7};
    dck_replica_result r;
    decide_case(roots, 3, 0, NULL, &r);
    ck_assert_int_eq(r.same, 1);
    ck_assert_int_eq(r.tensor, -1);
    ck_assert_uint_eq(r.ngroups, 0);
    dck_replica_result_release(&r);
}
END_TEST

/* 3 ranks, rank 2 differs in tensor 1 of 3 */
START_TEST(decide_three_one_deviant) {
    uint64_t roots[] = {7, 7, 9};
    uint64_t table[] = {1, 2, 3, /**/ 1, 2, 3, /**/ 1, 5, 3};
    dck_replica_result r;
    decide_case(roots, 3, 3, table, &r);
    ck_assert_int_eq(r.same, 0);
    ck_assert_int_eq(r.majority, 1);
    assert_ranks(r.deviant, r.ndeviant, (int[]){2}, 1);
    ck_assert_int_eq(r.tensor, 1);
    ck_assert_uint_eq(r.ngroups, 2);
    assert_ranks(r.groups[0].ranks, r.groups[0].nranks, (int[]){0, 1}, 2);
    assert_ranks(r.groups[1].ranks, r.groups[1].nranks, (int[]){2}, 1);
    ck_assert(dck_digest_equal(r.groups[1].root, D(9)));
    dck_replica_result_release(&r);
}
END_TEST

/* 4 ranks, rank 1 differs in its last tensor */
START_TEST(decide_four_one_deviant) {
    uint64_t roots[] = {7, 9, 7, 7};
    uint64_t table[] = {1, 2, /**/ 1, 4, /**/ 1, 2, /**/ 1, 2};
    dck_replica_result r;
    decide_case(roots, 4, 2, table, &r);
    ck_assert_int_eq(r.majority, 1);
    assert_ranks(r.deviant, r.ndeviant, (int[]){1}, 1);
    ck_assert_int_eq(r.tensor, 1);
    dck_replica_result_release(&r);
}
END_TEST

/* rank 0 is the faulty one: rank 0 is named, not every other rank */
START_TEST(decide_rank0_deviant) {
    uint64_t roots[] = {9, 7, 7, 7};
    uint64_t table[] = {6, 2, /**/ 1, 2, /**/ 1, 2, /**/ 1, 2};
    dck_replica_result r;
    decide_case(roots, 4, 2, table, &r);
    ck_assert_int_eq(r.majority, 1);
    assert_ranks(r.deviant, r.ndeviant, (int[]){0}, 1);
    ck_assert_int_eq(r.tensor, 0);
    /* the largest group first */
    assert_ranks(r.groups[0].ranks, r.groups[0].nranks, (int[]){1, 2, 3}, 3);
    assert_ranks(r.groups[1].ranks, r.groups[1].nranks, (int[]){0}, 1);
    dck_replica_result_release(&r);
}
END_TEST

/* two replicas that differ: a mismatch, and nobody named */
START_TEST(decide_two_no_culprit) {
    uint64_t roots[] = {7, 9};
    uint64_t table[] = {1, 2, /**/ 1, 3};
    dck_replica_result r;
    decide_case(roots, 2, 2, table, &r);
    ck_assert_int_eq(r.same, 0);
    ck_assert_int_eq(r.majority, 0);
    ck_assert_uint_eq(r.ndeviant, 0);
    ck_assert_int_eq(r.tensor, 1);
    ck_assert_uint_eq(r.ngroups, 2);
    dck_replica_result_release(&r);
}
END_TEST

/* 2 against 2: no majority, never a guess */
START_TEST(decide_split_two_two) {
    uint64_t roots[] = {7, 9, 9, 7};
    uint64_t table[] = {1, /**/ 2, /**/ 2, /**/ 1};
    dck_replica_result r;
    decide_case(roots, 4, 1, table, &r);
    ck_assert_int_eq(r.majority, 0);
    ck_assert_uint_eq(r.ndeviant, 0);
    ck_assert_uint_eq(r.ngroups, 2);
    assert_ranks(r.groups[0].ranks, r.groups[0].nranks, (int[]){0, 3}, 2);
    assert_ranks(r.groups[1].ranks, r.groups[1].nranks, (int[]){1, 2}, 2);
    dck_replica_result_release(&r);
}
END_TEST

/* 5 ranks 2/2/1: the largest group is no majority */
START_TEST(decide_five_two_two_one) {
    uint64_t roots[] = {11, 7, 9, 7, 9};
    uint64_t table[] = {1, 4, /**/ 1, 2, /**/ 1, 3, /**/ 1, 2, /**/ 1, 3};
    dck_replica_result r;
    decide_case(roots, 5, 2, table, &r);
    ck_assert_int_eq(r.majority, 0);
    ck_assert_uint_eq(r.ndeviant, 0);
    ck_assert_uint_eq(r.ngroups, 3);
    assert_ranks(r.groups[0].ranks, r.groups[0].nranks, (int[]){1, 3}, 2);
    assert_ranks(r.groups[1].ranks, r.groups[1].nranks, (int[]){2, 4}, 2);
    assert_ranks(r.groups[2].ranks, r.groups[2].nranks, (int[]){0}, 1);
    ck_assert_int_eq(r.tensor, 1);
    dck_replica_result_release(&r);
}
END_TEST

/* roots that differ over equal digests: a damaged root is trouble, not a verdict */
START_TEST(decide_roots_without_tensor) {
    dck_digest roots[] = {D(7), D(9), D(7)}, table[] = {D(1), D(1), D(1)};
    dck_replica_result r = {0};
    r.nranks = 3;
    ck_assert_int_eq(dck_replica_decide(roots, 3, table, 1, &r), DCK_ERR_COMM);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "every tensor's digest agrees"));
    dck_replica_result_release(&r);
}
END_TEST

/* ------------------------------------------------------------------ tensors */

enum { NT = 3, NEL = 1000 };
static const char *const names[NT] = {"model.embed.weight", "model.layers.0.weight",
                                      "optimizer.state.model.layers.0.weight.exp_avg"};

typedef struct {
    float data[NT][NEL];
    dck_replica_tensor t[NT];
} model;

static void flip(float *p, int bit) {
    uint32_t u;
    memcpy(&u, p, 4);
    u ^= 1u << bit;
    memcpy(p, &u, 4);
}

static void model_init(model *m) {
    for (int i = 0; i < NT; i++) {
        for (int j = 0; j < NEL; j++) m->data[i][j] = (float)(i * NEL + j) * 0.25f;
        m->t[i] = (dck_replica_tensor){.name = names[i], .dtype = DCK_F32, .ndim = 1, .shape = {NEL},
                                       .data = m->data[i], .nbytes = sizeof m->data[i]};
    }
}

START_TEST(single_rank) {
    model m;
    model_init(&m);
    dck_replica_result r;
    ck_assert_int_eq(dck_replica_check(m.t, NT, NULL, &r), DCK_OK);
    /* one replica: nothing compared, which is no agreement */
    ck_assert_int_eq(r.compared, 0);
    ck_assert_int_eq(r.same, 0);
    ck_assert_ptr_null(r.deviant);
    ck_assert_int_eq(r.nranks, 1);
    ck_assert_int_eq(r.rank, 0);
    /* the root: dck_root_digest over the CPU digests */
    dck_digest d[NT];
    for (int i = 0; i < NT; i++)
        ck_assert_int_eq(dck_digest_buffer(DCK_F32, m.t[i].shape, 1, m.data[i], sizeof m.data[i], 0, &d[i]),
                         DCK_OK);
    ck_assert(dck_digest_equal(r.root, dck_root_digest(names, d, NT)));
    dck_replica_result_release(&r);
    /* a flipped bit changes the root */
    flip(&m.data[1][17], 3);
    dck_replica_result r2;
    ck_assert_int_eq(dck_replica_check(m.t, NT, NULL, &r2), DCK_OK);
    ck_assert(!dck_digest_equal(r2.root, dck_root_digest(names, d, NT)));
    dck_replica_result_release(&r2);
    /* no tensors: no evidence of agreement, refused */
    ck_assert_int_eq(dck_replica_check(m.t, 0, NULL, &r2), DCK_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "no tensors given"));
    /* a name given twice: refused (the root could not tell whose digest is whose) */
    m.t[2].name = names[0];
    ck_assert_int_eq(dck_replica_check(m.t, NT, NULL, &r2), DCK_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "tensor model.embed.weight given twice"));
    m.t[2].name = names[2];
    /* bad input: the tensor named */
    m.t[2].nbytes -= 4;
    ck_assert_int_eq(dck_replica_check(m.t, NT, NULL, &r2), DCK_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), names[2]));
    ck_assert_ptr_null(r2.deviant);
}
END_TEST

/* ------------------------------------------------------------------ ranks as threads */

enum { MAXK = 5 };

typedef struct {
    pthread_barrier_t bar;
    const void *slot[MAXK];
    int K;
} shared_mem;

typedef struct {
    shared_mem *sh;
    int rank;
    model m;
    size_t n;
    dck_status status;
    char error[512];
    dck_replica_result r;
} rank_ctx;

static dck_status thread_allgather(void *ctx, const void *send, void *recv, size_t n) {
    rank_ctx *c = ctx;
    c->sh->slot[c->rank] = send;
    pthread_barrier_wait(&c->sh->bar);
    for (int q = 0; q < c->sh->K; q++) memcpy((char *)recv + (size_t)q * n, c->sh->slot[q], n);
    pthread_barrier_wait(&c->sh->bar);
    return DCK_OK;
}

static void *rank_main(void *arg) {
    rank_ctx *c = arg;
    dck_replica_transport tr = {c, c->rank, c->sh->K, thread_allgather};
    c->status = dck_replica_run(c->m.t, c->n, NULL, &tr, &c->r);
    snprintf(c->error, sizeof c->error, "%s", c->status ? dck_last_error() : "");
    return NULL;
}

/* K ranks; edit(rank, ctx) spoils one rank's state before the check */
static rank_ctx *run_ranks(int K, void (*edit)(rank_ctx *)) {
    static shared_mem sh;
    rank_ctx *c = calloc((size_t)K, sizeof *c);
    pthread_t th[MAXK];
    sh.K = K;
    pthread_barrier_init(&sh.bar, NULL, (unsigned)K);
    for (int r = 0; r < K; r++) {
        c[r].sh = &sh;
        c[r].rank = r;
        c[r].n = NT;
        model_init(&c[r].m);
        if (edit) edit(&c[r]);
    }
    for (int r = 0; r < K; r++) pthread_create(&th[r], NULL, rank_main, &c[r]);
    for (int r = 0; r < K; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&sh.bar);
    return c;
}

static void free_ranks(rank_ctx *c, int K) {
    for (int r = 0; r < K; r++) dck_replica_result_release(&c[r].r);
    free(c);
}

static void flip_rank2(rank_ctx *c) {
    if (c->rank == 2) flip(&c->m.data[2][999], 30);
}

START_TEST(threads_equal) {
    rank_ctx *c = run_ranks(4, NULL);
    for (int r = 0; r < 4; r++) {
        ck_assert_msg(c[r].status == DCK_OK, "%s", c[r].error);
        ck_assert_int_eq(c[r].r.compared, 1);
        ck_assert_int_eq(c[r].r.same, 1);
        ck_assert_int_eq(c[r].r.rank, r);
        ck_assert_ptr_null(c[r].r.hosts);
    }
    free_ranks(c, 4);
}
END_TEST

START_TEST(threads_flip_named) {
    for (int K = 3; K <= 4; K++) {
        rank_ctx *c = run_ranks(K, flip_rank2);
        for (int r = 0; r < K; r++) {
            ck_assert_msg(c[r].status == DCK_OK, "%s", c[r].error);
            ck_assert_int_eq(c[r].r.compared, 1);
            ck_assert_int_eq(c[r].r.same, 0);
            ck_assert_int_eq(c[r].r.majority, 1);
            assert_ranks(c[r].r.deviant, c[r].r.ndeviant, (int[]){2}, 1);
            ck_assert_int_eq(c[r].r.tensor, 2);
            ck_assert_str_eq(c[r].r.tensor_name, names[2]);
            ck_assert_ptr_nonnull(c[r].r.hosts);
            ck_assert_ptr_nonnull(strstr(c[r].r.hosts[2], " cpu"));
        }
        free_ranks(c, K);
    }
}
END_TEST

static void flip_rank0(rank_ctx *c) {
    if (c->rank == 0) flip(&c->m.data[0][0], 0);
}

START_TEST(threads_two_ranks_no_culprit) {
    rank_ctx *c = run_ranks(2, flip_rank0);
    for (int r = 0; r < 2; r++) {
        ck_assert_msg(c[r].status == DCK_OK, "%s", c[r].error);
        ck_assert_int_eq(c[r].r.same, 0);
        ck_assert_int_eq(c[r].r.majority, 0);
        ck_assert_uint_eq(c[r].r.ndeviant, 0);
        ck_assert_str_eq(c[r].r.tensor_name, names[0]);
    }
    free_ranks(c, 2);
}
END_TEST

/* another tensor list on rank 1: trouble on every rank, rank 1 named */
static void rename_rank1(rank_ctx *c) {
    if (c->rank == 1) c->m.t[1].name = "model.layers.1.weight";
}
static void shorter_rank1(rank_ctx *c) {
    if (c->rank == 1) c->n = NT - 1;
}
static void reshape_rank1(rank_ctx *c) {
    if (c->rank == 1) c->m.t[0].ndim = 2, c->m.t[0].shape[0] = 10, c->m.t[0].shape[1] = 100;
}

START_TEST(threads_other_list_is_trouble) {
    void (*edits[])(rank_ctx *) = {rename_rank1, shorter_rank1, reshape_rank1};
    for (size_t e = 0; e < sizeof edits / sizeof edits[0]; e++) {
        rank_ctx *c = run_ranks(3, edits[e]);
        for (int r = 0; r < 3; r++) {
            ck_assert_msg(c[r].status == DCK_ERR_MISMATCH, "edit %zu rank %d: %d %s", e, r, c[r].status,
                          c[r].error);
            ck_assert_msg(strstr(c[r].error, "rank 1 holds another tensor list"), "%s", c[r].error);
            ck_assert_int_eq(c[r].r.same, 0);
            ck_assert_ptr_null(c[r].r.deviant);
        }
        free_ranks(c, 3);
    }
}
END_TEST

/* a rank that cannot digest: every rank reports its message (none waits) */
static void bad_bytes_rank1(rank_ctx *c) {
    if (c->rank == 1) c->m.t[2].nbytes = 12;
}
/* device memory where there is no GPU (the CPU build and machines without
 * one): the GPU digest's message, from every rank */
static void cuda_rank0(rank_ctx *c) {
    if (c->rank == 0) c->m.t[0].memory = DCK_MEMORY_CUDA;
}

START_TEST(threads_failed_rank_reported_everywhere) {
    rank_ctx *c = run_ranks(3, bad_bytes_rank1);
    for (int r = 0; r < 3; r++) {
        ck_assert_int_eq(c[r].status, DCK_ERR_INVALID);
        ck_assert_msg(strstr(c[r].error, "replica check: rank 1: tensor optimizer.state.model.layers.0.weight"
                                         ".exp_avg"), "%s", c[r].error);
    }
    free_ranks(c, 3);
    int ndev = 0;
    if (dck_gpu_device_count(&ndev) == DCK_OK) TU_SKIP("a GPU is here: host memory passed as device memory "
                                                      "is not the failure this case needs");
    c = run_ranks(3, cuda_rank0);
    for (int r = 0; r < 3; r++) {
        ck_assert_int_eq(c[r].status, DCK_ERR_NODEVICE);
        ck_assert_msg(strstr(c[r].error, "replica check: rank 0: tensor model.embed.weight"), "%s", c[r].error);
    }
    free_ranks(c, 3);
}
END_TEST

/* every rank failing alike: each its own message, no verdict */
static void bad_bytes_all(rank_ctx *c) { c->m.t[0].nbytes = 4; }

START_TEST(threads_all_failed) {
    rank_ctx *c = run_ranks(3, bad_bytes_all);
    for (int r = 0; r < 3; r++) {
        ck_assert_int_eq(c[r].status, DCK_ERR_INVALID);
        ck_assert_msg(strstr(c[r].error, "replica check: tensor model.embed.weight"), "%s", c[r].error);
    }
    free_ranks(c, 3);
}
END_TEST

int main(void) {
    Suite *s = suite_create("replica");
    TCase *tc = tcase_create("decide");
    tcase_add_test(tc, decide_equal);
    tcase_add_test(tc, decide_three_one_deviant);
    tcase_add_test(tc, decide_four_one_deviant);
    tcase_add_test(tc, decide_rank0_deviant);
    tcase_add_test(tc, decide_two_no_culprit);
    tcase_add_test(tc, decide_split_two_two);
    tcase_add_test(tc, decide_five_two_two_one);
    tcase_add_test(tc, decide_roots_without_tensor);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("ranks");
    tcase_set_timeout(tr, 30);
    tcase_add_test(tr, single_rank);
    tcase_add_test(tr, threads_equal);
    tcase_add_test(tr, threads_flip_named);
    tcase_add_test(tr, threads_two_ranks_no_culprit);
    tcase_add_test(tr, threads_other_list_is_trouble);
    tcase_add_test(tr, threads_failed_rank_reported_everywhere);
    tcase_add_test(tr, threads_all_failed);
    suite_add_tcase(s, tr);
    return tu_run(s);
}

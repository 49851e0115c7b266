/* Data-parallel replicas compared in a C trainer (man detcheck-replica(7)).
 *
 * Every rank holds the same "model" (weights, a bias, an Adam moment, with
 * sizes that are no round numbers) and calls dck_replica_check, as a trainer
 * would after each optimizer step. --flip RANK:NAME:ELEMENT:BIT flips one bit
 * of one tensor on one rank first (repeated: up to 4 flips): the check names that rank (by strict
 * majority) and the tensor. --drop RANK leaves the last tensor out on one
 * rank: another tensor list, which is trouble, not a verdict. Rank 0 prints
 * the verdict.
 *
 *   mpirun -np 3 replica_check --flip 2:layers.0.weight:100:7
 *
 * Build (after make), with Open MPI's compiler wrapper (this program calls
 * MPI_Init itself, as a trainer does; libdetcheck then uses that MPI):
 *   mpicc -std=c11 -Iinclude examples/replica_check.c build/libdetcheck.a \
 *       $(cat build/ldlibs.txt) -o replica_check
 * Tensors in CUDA device memory are passed with .memory = DCK_MEMORY_CUDA
 * (digested on the GPU, in place); a trainer that holds an NCCL
 * communicator of its replicas passes it as options.nccl_comm.
 *
 * Exit 0: every replica identical; 1: a replica differs; 2: trouble (a rank
 * missing or hung past DETCHECK_COLLECTIVE_TIMEOUT, another tensor list,
 * one replica alone: nothing compared; bad arguments). */
#include <detcheck.h>

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NT = 4 };

typedef struct {
    const char *name;
    int ndim;
    uint64_t shape[2];
} spec;

/* the model: prime sizes, so no tensor is a whole number of 128-byte segments */
static const spec model[NT] = {
    {"embed.weight", 2, {257, 31}},
    {"layers.0.weight", 2, {31, 37}},
    {"layers.0.bias", 1, {37}},
    {"optimizer.state.layers.0.weight.exp_avg", 2, {31, 37}},
};

static int usage(void) {
    fprintf(stderr, "usage: replica_check [--flip RANK:NAME:ELEMENT:BIT] [--drop RANK]\n");
    return 2;
}

typedef struct {
    int rank, bit;
    long element;
    char name[128];
} flip;

int main(int argc, char **argv) {
    flip flips[4];
    int nflips = 0, drop_rank = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--flip") && i + 1 < argc && nflips < 4) {
            flip *f = &flips[nflips++];
            const char *a = argv[++i];
            const char *c1 = strchr(a, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
            if (!c1 || !c2 || (size_t)(c2 - c1 - 1) >= sizeof f->name) return usage();
            f->rank = atoi(a);
            memcpy(f->name, c1 + 1, (size_t)(c2 - c1 - 1));
            f->name[c2 - c1 - 1] = 0;
            if (sscanf(c2 + 1, "%ld:%d", &f->element, &f->bit) != 2 || f->bit < 0 || f->bit > 31)
                return usage();
        } else if (!strcmp(argv[i], "--drop") && i + 1 < argc) {
            drop_rank = atoi(argv[++i]);
        } else {
            return usage();
        }
    }
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);

    /* the same values on every rank, as replicas after a step */
    float *data[NT];
    dck_replica_tensor t[NT];
    int found = 0;
    for (int i = 0; i < NT; i++) {
        uint64_t n = model[i].shape[0] * (model[i].ndim > 1 ? model[i].shape[1] : 1);
        data[i] = malloc(n * sizeof(float));
        if (!data[i]) return 2;
        for (uint64_t j = 0; j < n; j++) data[i][j] = (float)((j * 2654435761u + (uint64_t)i) % 1000) * 1e-3f;
        t[i] = (dck_replica_tensor){.name = model[i].name, .dtype = DCK_F32, .ndim = model[i].ndim,
                                    .data = data[i], .nbytes = n * sizeof(float), .memory = DCK_MEMORY_HOST};
        memcpy(t[i].shape, model[i].shape, sizeof model[i].shape);
        for (int k = 0; k < nflips; k++) {
            const flip *f = &flips[k];
            if (strcmp(model[i].name, f->name) || f->element < 0 || (uint64_t)f->element >= n) continue;
            found++;
            if (rank == f->rank) {
                uint32_t u;
                memcpy(&u, &data[i][f->element], 4);
                u ^= 1u << f->bit;
                memcpy(&data[i][f->element], &u, 4);
            }
        }
    }
    int flipped = found == nflips;
    if (!flipped) {
        if (rank == 0) fprintf(stderr, "replica_check: --flip: a tensor or element that is not there\n");
        MPI_Finalize();
        return 2;
    }

    dck_replica_result r;
    dck_status s = dck_replica_check(t, rank == drop_rank ? NT - 1 : NT, NULL, &r);
    if (s == DCK_ERR_COMM) {
        /* every rank says it (rank 0 may be the one that is gone; the
         * message names the rank). After a timeout MPI_Finalize would wait
         * for the missing rank: exit at once */
        fprintf(stderr, "replica_check: %s\n", dck_last_error());
        return 2;
    }
    if (s) { /* the same trouble on every rank */
        if (rank == 0) fprintf(stderr, "replica_check: %s\n", dck_last_error());
        MPI_Finalize();
        return 2;
    }
    /* a group of one compares nothing: no evidence, no verdict */
    int code = !r.compared ? 2 : r.same ? 0 : 1;
    if (rank == 0) {
        char hex[33];
        dck_digest_to_hex(r.root, hex);
        if (!r.compared) {
            fprintf(stderr, "replica_check: one replica (start it with mpirun -np 3 or more): nothing compared\n");
        } else if (r.same) {
            printf("%d replicas identical (root %s)\n", r.nranks, hex);
        } else {
            printf("replicas differ: first differing tensor %s\n", r.tensor_name);
            for (size_t i = 0; i < r.ndeviant; i++)
                printf("rank %d differs from the majority (%s)\n", r.deviant[i], r.hosts[r.deviant[i]]);
            if (!r.majority && r.nranks == 2)
                printf("two replicas differ: a third is needed to tell which\n");
            else if (!r.majority)
                printf("no majority: no group of identical ranks holds more than half\n");
            for (size_t g = 0; g < r.ngroups; g++) {
                printf("group %zu:", g + 1);
                for (size_t k = 0; k < r.groups[g].nranks; k++) printf(" %d", r.groups[g].ranks[k]);
                printf("\n");
            }
        }
    }
    dck_replica_result_release(&r);
    for (int i = 0; i < NT; i++) free(data[i]);
    MPI_Finalize();
    return code;
}

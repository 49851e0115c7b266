/* The GPU of a rank (gpu_choice.h). Reads only the environment: the device
 * count is the caller's, so the rule is tested without a GPU
 * (tests/check_gpu_choice.c). */
#include "gpu/gpu_choice.h"
#include "common/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Node-local rank, the variables of the launcher that started the ranks
 * first: mpirun or mpiexec inside a Slurm allocation passes its ranks the
 * SLURM_LOCALID of its own daemon (0 on every node), so Slurm's comes last,
 * for srun's direct launch. */
static const char *const local_vars[] = {
    "OMPI_COMM_WORLD_LOCAL_RANK", /* Open MPI's mpirun */
    "MPI_LOCALRANKID",            /* MPICH / Intel MPI (Hydra) */
    "MV2_COMM_WORLD_LOCAL_RANK",  /* MVAPICH2 */
    "PALS_LOCAL_RANKID",          /* Cray PALS */
    "PMI_LOCAL_RANK",             /* PMI launchers */
    "FLUX_TASK_LOCAL_ID",         /* Flux */
    "SLURM_LOCALID",              /* srun */
};

/* The rank in the job, for a launcher that gives no local rank. */
static const char *const rank_vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                        "MV2_COMM_WORLD_RANK", "PALS_RANKID", "FLUX_TASK_RANK",
                                        "SLURM_PROCID"};

#define COUNT(a) (sizeof a / sizeof a[0])

static int env_rank(const char *const *vars, size_t n, const char **from) {
    for (size_t i = 0; i < n; i++) {
        const char *v = getenv(vars[i]);
        char *end;
        if (!v || !*v) continue;
        long x = strtol(v, &end, 10);
        if (*end || x < 0 || x >= (1 << 24)) continue; /* not a rank: the next variable */
        if (from) *from = vars[i];
        return (int)x;
    }
    return -1;
}

int dck_gpu_local_rank(const char **from) {
    if (from) *from = NULL;
    return env_rank(local_vars, COUNT(local_vars), from);
}

dck_status dck_gpu_choose(int rank, int ndevices, dck_gpu_choice *out) {
    memset(out, 0, sizeof *out);
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    out->local = dck_gpu_local_rank(&out->from);
    if (ndevices < 1)
        return dck_set_error(DCK_ERR_NODEVICE, "no CUDA device visible (CUDA_VISIBLE_DEVICES=%s)",
                             vis ? vis : "unset");
    int r = out->local;
    if (r < 0) r = env_rank(rank_vars, COUNT(rank_vars), &out->from);
    if (r < 0) {
        r = rank > 0 ? rank : 0;
        out->from = "rank";
    }
    out->index = r % ndevices;
    /* the entry the index stands for (an index, a UUID or a MIG instance),
     * for messages: the runtime counts entries up to the first invalid one */
    if (vis) {
        const char *p = vis;
        for (int k = 0; k < out->index && p; k++) {
            p = strchr(p, ',');
            if (p) p++;
        }
        if (p) snprintf(out->visible, sizeof out->visible, "%.*s", (int)strcspn(p, ","), p);
    }
    return DCK_OK;
}

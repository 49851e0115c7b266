/* The one rule that puts a rank on a GPU (src/gpu/gpu_choice.c), used by
 * detcheck train, hash --distributed and canary (detcheck-gpu(7), DEVICE). The device
 * count is the test's, so it runs without a GPU: local ranks beyond the
 * count share the GPUs round-robin instead of finding none, launchers'
 * variables take precedence over a stale SLURM_LOCALID, CUDA_VISIBLE_DEVICES
 * names the entry, and an unknown launcher falls back to the job rank. */
#include "testutil.h"
#include "gpu/gpu_choice.h"

#include <stdlib.h>
#include <string.h>

static const char *const all_vars[] = {
    "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "PALS_LOCAL_RANKID",
    "PMI_LOCAL_RANK", "FLUX_TASK_LOCAL_ID", "SLURM_LOCALID", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
    "PMIX_RANK", "MV2_COMM_WORLD_RANK", "PALS_RANKID", "FLUX_TASK_RANK", "SLURM_PROCID",
    "CUDA_VISIBLE_DEVICES"};

static void clean_env(void) {
    for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++) unsetenv(all_vars[i]);
}

static int pick(int rank, int n) {
    dck_gpu_choice c;
    ck_assert_int_eq(dck_gpu_choose(rank, n, &c), DCK_OK);
    ck_assert(c.index >= 0 && c.index < n);
    return c.index;
}

/* the bug this guards against: rank 5 of a node with 4 GPUs saw none */
START_TEST(local_rank_beyond_the_count_wraps) {
    clean_env();
    static const struct {
        const char *var;
        int local, n, want;
    } rows[] = {
        {"OMPI_COMM_WORLD_LOCAL_RANK", 0, 4, 0}, {"OMPI_COMM_WORLD_LOCAL_RANK", 3, 4, 3},
        {"OMPI_COMM_WORLD_LOCAL_RANK", 4, 4, 0}, {"OMPI_COMM_WORLD_LOCAL_RANK", 5, 4, 1},
        {"OMPI_COMM_WORLD_LOCAL_RANK", 7, 2, 1}, {"OMPI_COMM_WORLD_LOCAL_RANK", 9, 1, 0},
        {"SLURM_LOCALID", 6, 4, 2},              {"MPI_LOCALRANKID", 10, 8, 2},
        {"PMI_LOCAL_RANK", 3, 2, 1},             {"MV2_COMM_WORLD_LOCAL_RANK", 5, 3, 2},
        {"PALS_LOCAL_RANKID", 8, 8, 0},          {"FLUX_TASK_LOCAL_ID", 9, 4, 1},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char v[16];
        snprintf(v, sizeof v, "%d", rows[i].local);
        setenv(rows[i].var, v, 1);
        dck_gpu_choice c;
        /* the caller's rank (here 13) does not matter when the launcher gives a local rank */
        ck_assert_int_eq(dck_gpu_choose(13, rows[i].n, &c), DCK_OK);
        ck_assert_msg(c.index == rows[i].want, "%s=%d, %d GPUs: %d, want %d", rows[i].var, rows[i].local,
                      rows[i].n, c.index, rows[i].want);
        ck_assert_int_eq(c.local, rows[i].local);
        ck_assert_str_eq(c.from, rows[i].var);
        ck_assert_int_eq(dck_gpu_local_rank(NULL), rows[i].local);
        unsetenv(rows[i].var);
    }
}
END_TEST

/* mpirun in a Slurm job hands every rank its daemon's SLURM_LOCALID (0):
 * the MPI launcher's variable wins */
START_TEST(launcher_variable_beats_stale_slurm) {
    clean_env();
    setenv("SLURM_LOCALID", "0", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3", 1);
    ck_assert_int_eq(pick(0, 4), 3);
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    setenv("MPI_LOCALRANKID", "2", 1);
    ck_assert_int_eq(pick(0, 4), 2);
    unsetenv("MPI_LOCALRANKID");
    ck_assert_int_eq(pick(5, 4), 0); /* srun's direct launch: Slurm's is the local rank */
    /* a value that is no rank is skipped, not read as 0 */
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x", 1);
    setenv("SLURM_LOCALID", "3", 1);
    ck_assert_int_eq(pick(0, 4), 3);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "-1", 1);
    ck_assert_int_eq(pick(0, 4), 3);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "", 1);
    ck_assert_int_eq(pick(0, 4), 3);
    clean_env();
}
END_TEST

/* no local rank: the job rank the launcher set, else the caller's */
START_TEST(unknown_launcher_falls_back_to_rank) {
    clean_env();
    dck_gpu_choice c;
    ck_assert_int_eq(dck_gpu_choose(13, 8, &c), DCK_OK);
    ck_assert_int_eq(c.index, 5);
    ck_assert_int_eq(c.local, -1);
    ck_assert_str_eq(c.from, "rank");
    ck_assert_int_eq(dck_gpu_local_rank(NULL), -1);
    ck_assert_int_eq(pick(0, 8), 0);
    ck_assert_int_eq(pick(-1, 8), 0);
    /* a single-rank run inside a job (canary's trainer passes 0) still
     * takes the job's rank */
    setenv("PMIX_RANK", "6", 1);
    ck_assert_int_eq(dck_gpu_choose(0, 4, &c), DCK_OK);
    ck_assert_int_eq(c.index, 2);
    ck_assert_str_eq(c.from, "PMIX_RANK");
    setenv("SLURM_PROCID", "1", 1); /* PMIx's comes first */
    ck_assert_int_eq(pick(0, 4), 2);
    clean_env();
    setenv("SLURM_PROCID", "9", 1);
    ck_assert_int_eq(pick(0, 4), 1);
    clean_env();
}
END_TEST

/* CUDA_VISIBLE_DEVICES narrows what the runtime counts; the index is among
 * those, and the entry is named */
START_TEST(visible_devices_entry_is_named) {
    clean_env();
    setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "6", 1);
    dck_gpu_choice c;
    ck_assert_int_eq(dck_gpu_choose(0, 4, &c), DCK_OK);
    ck_assert_int_eq(c.index, 2);
    ck_assert_str_eq(c.visible, "6");
    /* srun --gpus-per-task=1: one visible, whatever the local rank */
    setenv("CUDA_VISIBLE_DEVICES", "GPU-8f1c2a", 1);
    ck_assert_int_eq(dck_gpu_choose(0, 1, &c), DCK_OK);
    ck_assert_int_eq(c.index, 0);
    ck_assert_str_eq(c.visible, "GPU-8f1c2a");
    /* an invalid entry ends the runtime's list: the count wins */
    setenv("CUDA_VISIBLE_DEVICES", "0,1,99", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
    ck_assert_int_eq(dck_gpu_choose(0, 2, &c), DCK_OK);
    ck_assert_int_eq(c.index, 0);
    ck_assert_str_eq(c.visible, "0");
    unsetenv("CUDA_VISIBLE_DEVICES");
    ck_assert_int_eq(dck_gpu_choose(0, 2, &c), DCK_OK);
    ck_assert_str_eq(c.visible, "");
    /* none visible: an error that says what the variable held */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    ck_assert_int_eq(dck_gpu_choose(0, 0, &c), DCK_ERR_NODEVICE);
    ck_assert_msg(strstr(dck_last_error(), "CUDA_VISIBLE_DEVICES=") != NULL, "%s", dck_last_error());
    unsetenv("CUDA_VISIBLE_DEVICES");
    ck_assert_int_eq(dck_gpu_choose(3, -1, &c), DCK_ERR_NODEVICE);
    ck_assert_msg(strstr(dck_last_error(), "unset") != NULL, "%s", dck_last_error());
    clean_env();
}
END_TEST

int main(void) {
    Suite *s = suite_create("gpu_choice");
    TCase *tc = tcase_create("choice");
    tcase_add_test(tc, local_rank_beyond_the_count_wraps);
    tcase_add_test(tc, launcher_variable_beats_stale_slurm);
    tcase_add_test(tc, unknown_launcher_falls_back_to_rank);
    tcase_add_test(tc, visible_devices_entry_is_named);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

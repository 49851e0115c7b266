/* detcheck hash --device cuda|auto and --distributed: the planned paths
 * (src/hash/hash_distributed.c). cmd_hash.c parses the options and calls here
 * when either is given; the manifest is the one plain `hash` writes. */
#include "cli.h"
#include "hash/hash.h"
#include "common/common.h" /* dck_comm */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every rank's answer to "do I have a usable GPU?"; with --device cuda a
 * rank without one fails them all, with auto all use the CPU. */
static dck_status resolve_device(dck_comm *comm, dck_device asked, dck_device *out, char *why,
                                 size_t nwhy) {
    int n = 0;
    dck_status s = dck_gpu_device_count(&n);
    snprintf(why, nwhy, "%s", s ? dck_last_error() : "");
    int size = dck_comm_size(comm);
    unsigned char mine = s == DCK_OK, *all = malloc((size_t)size);
    if (!all) return dck_oom(NULL);
    dck_status cs = dck_comm_allgather(comm, &mine, all, 1);
    int everyone = 1;
    for (int r = 0; r < size && !cs; r++)
        if (!all[r]) everyone = 0;
    free(all);
    if (cs) return cs;
    if (asked == DCK_DEVICE_CPU || (asked == DCK_DEVICE_AUTO && !everyone)) {
        *out = DCK_DEVICE_CPU;
        if (asked == DCK_DEVICE_AUTO && s == DCK_OK)
            snprintf(why, nwhy, "another rank has no CUDA device");
        return DCK_OK;
    }
    if (!everyone) {
        if (s) return dck_set_error(DCK_ERR_NODEVICE, "--device cuda: %s", why);
        return dck_set_error(DCK_ERR_NODEVICE, "--device cuda: another rank has no CUDA device");
    }
    *out = DCK_DEVICE_CUDA;
    return DCK_OK;
}

int cmd_hash_planned(int argc, char **argv, const char *const *paths, size_t npaths,
                     const dck_options *o, dck_format fmt, const char *output, dck_device device,
                     int distributed) {
    dck_comm *comm = dck_comm_self();
    dck_status s = DCK_OK;
    if (distributed) {
        s = dck_comm_init(&argc, &argv, &comm);
        if (s) return cli_fail("hash", s);
        cli_rank = dck_comm_rank(comm);
    }
    int rc = DCK_EXIT_TROUBLE;
    dck_checkpoint *ck = NULL;
    dck_manifest *m = NULL;
    dck_device use = DCK_DEVICE_CPU;
    char why[512];
    s = resolve_device(comm, device, &use, why, sizeof why);
    if (s) {
        rc = cli_fail("hash", s);
        goto out;
    }
    if (device == DCK_DEVICE_AUTO && use == DCK_DEVICE_CPU)
        cli_info("hash", "device auto: hashing on the CPU (%s)", why);
    else if (device == DCK_DEVICE_AUTO)
        cli_info("hash", "device auto: hashing on the GPU");
    if (distributed && !dck_comm_is_mpi(comm))
        cli_info("hash", "--distributed without an MPI launcher: hashing as one rank");
    s = dck_comm_agree(comm, dck_checkpoint_open(paths, npaths, o, &ck));
    if (s) {
        rc = cli_fail("hash", s);
        goto out;
    }
    dck_hash_plan plan = {use, dck_comm_is_mpi(comm) && distributed, 0};
    const char *mib = getenv("DETCHECK_GPU_BUFFER_MIB");
    long v;
    if (mib && cli_parse_long(mib, 4, 4096, &v)) plan.gpu_buffer_bytes = (size_t)v << 20;
    /* progress as plain hash draws it; on rank 0 only (cli_progress_enabled),
     * counting rank 0's own bytes (hash_distributed.c) */
    dck_options po = *o;
    po.progress = cli_progress;
    s = dck_checkpoint_hash_plan(ck, &po, &plan, &m);
    cli_progress_end();
    if (s) {
        rc = cli_fail("hash", s);
        goto out;
    }
    if (cli_rank == 0) {
        char how[64];
        snprintf(how, sizeof how, " (%s%s)", dck_device_name(use),
                 dck_comm_size(comm) > 1 ? ", distributed" : "");
        s = cli_emit_manifest(m, paths, npaths, fmt, output, how);
    }
    s = dck_comm_agree(comm, s);
    rc = s ? cli_fail("hash", s) : 0;
out:
    dck_manifest_free(m);
    dck_checkpoint_free(ck);
    if (distributed) dck_comm_finalize(comm);
    return rc;
}

/* A synthetic canary report of any size, written through the CLI's report
 * code as `detcheck canary` writes it (cli_canary_report, the figure,
 * cli_report_finish): a job of 1,024 GPUs needs no cluster to test its page
 * (tests/cli/test_html_canary.sh, examples/reports/make_canary.sh).
 *
 *   html_canary_synth [--html F] [--junit F] [--markdown F] [--cyclic] [--odd]
 *                     NRANKS HOSTS [DIFFERS [TIMEOUT [ERROR]]]
 *
 * NRANKS ranks on HOSTS hosts (the first NRANKS % HOSTS hosts hold one rank
 * more), placed by block (ranks 0..7 on the first host...) or with --cyclic
 * round-robin (rank r on host r % HOSTS). Host h is gpu-node-NNN; with
 * --odd, host 1's long name holds HTML's special characters, a control
 * character and a non-ASCII one. Every rank is identical but DIFFERS (at
 * step 3 in grad.blocks.1.mlp.fc.weight, bit 7), TIMEOUT (no report: host
 * unknown) and ERROR (a CUDA error); -1 or absent: none. Exit 0 when the
 * reports were written, 2 when not (the message names why). */
#include "cli/cli.h"
#include "report/html.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static const char odd_host[] = "r<7>&\"q\"'\x01\xc3\xa9-very-long-host-name-0001.cluster.example";

static int usage(void) {
    fprintf(stderr, "usage: html_canary_synth [--html F] [--junit F] [--markdown F] [--cyclic] [--odd] NRANKS HOSTS "
                    "[DIFFERS [TIMEOUT [ERROR]]]\n");
    return 2;
}

int main(int argc, char **argv) {
    cli_report r;
    cli_report_init(&r, "canary");
    long num[5] = {0, 0, -1, -1, -1};
    int npos = 0;
    bool cyclic = false, odd = false;
    for (int i = 1; i < argc; i++) {
        int used = 0, t = cli_report_arg(&r, argv[i], i + 1 < argc ? argv[i + 1] : NULL, &used);
        if (t < 0) return 2;
        if (t) {
            i += used;
            continue;
        }
        if (!strcmp(argv[i], "--cyclic") || !strcmp(argv[i], "--odd")) {
            *(argv[i][2] == 'c' ? &cyclic : &odd) = true;
            continue;
        }
        if (npos == 5 || !cli_parse_long(argv[i], -1, 1 << 20, &num[npos])) return usage();
        npos++;
    }
    int K = (int)num[0], H = (int)num[1];
    if (npos < 2 || K < 1 || H < 1 || H > K) return usage();
    if (cli_report_check(&r, false, NULL, 0)) return 2;

    dck_canary_report rep;
    memset(&rep, 0, sizeof rep);
    rep.nranks = K;
    rep.steps = 8;
    rep.params = 30080;
    rep.ranks = calloc((size_t)K, sizeof *rep.ranks);
    if (!rep.ranks) return 2;
    snprintf(rep.oracle_text, sizeof rep.oracle_text, "CPU reference on rank 0");
    snprintf(rep.final_root, sizeof rep.final_root, "0123456789abcdef0123456789abcdef");
    int per = K / H, more = K % H;
    for (int i = 0; i < K; i++) {
        dck_canary_rank *x = &rep.ranks[i];
        int h, local;
        if (cyclic) {
            h = i % H;
            local = i / H;
        } else {
            /* the first `more` hosts hold per + 1 ranks */
            int big = more * (per + 1);
            h = i < big ? i / (per + 1) : more + (i - big) / per;
            local = i < big ? i % (per + 1) : (i - big) % per;
        }
        x->rank = i;
        x->local = local;
        x->gpu = local;
        x->passes = 1;
        if (h == 1 && odd) snprintf(x->host, sizeof x->host, "%s", odd_host);
        else snprintf(x->host, sizeof x->host, "gpu-node-%03d", h);
        snprintf(x->device, sizeof x->device, "cuda:%d of 8, CUDA_VISIBLE_DEVICES=unset: NVIDIA H200", local);
        snprintf(x->id, sizeof x->id, "pci 0000:%02x:00.0", (0x18 + local * 0x10) & 0xff);
        if (i == num[2]) {
            x->result = DCK_CANARY_DIFFERS;
            x->step = 3;
            snprintf(x->tensor, sizeof x->tensor, "grad.blocks.1.mlp.fc.weight");
            x->has_detail = true;
            x->detail_step = 3;
            x->numel = 4096;
            x->ndiff = 1;
            x->bits = 0x80;
        } else if (i == num[3]) {
            /* canary.c's record of a rank that never reported */
            x->result = DCK_CANARY_TIMEOUT;
            snprintf(x->host, sizeof x->host, "?");
            snprintf(x->device, sizeof x->device, "?");
            x->id[0] = 0;
            x->local = 0;
            x->gpu = -1;
            x->passes = 0;
            snprintf(x->error, sizeof x->error, "no report within 300 s (dead or hung)");
            rep.any_timeout = true;
        } else if (i == num[4]) {
            x->result = DCK_CANARY_ERROR;
            snprintf(x->error, sizeof x->error, "cuda: an illegal memory access was encountered <ECC?>");
        } else {
            rep.identical++;
        }
    }
    bool trouble = num[3] >= 0 || num[4] >= 0;
    rep.exit_code = trouble ? 2 : rep.identical == K ? 0 : 1;

    cli_canary_report(&r, &rep, "cuda", "synthetic");
    if (r.html) cli_report_figure(&r, cli_html_canary_figure(&rep));
    int rc = cli_report_finish(&r, rep.exit_code);
    dck_canary_report_release(&rep);
    return rc;
}

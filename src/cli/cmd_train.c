/* detcheck train: the built-in deterministic training loop (CPU, MPI data
 * parallel). See man/detcheck-train.1. */
#include "cli.h"
#include "gpu/gpu_blas.h"  /* dck_blas_cuda_bench: the fast baseline */
#include "gpu/gpu_train.h" /* dck_tk_cuda_fma_peak: the benchmark's peer */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: detcheck train [OPTIONS]\n"
            "       mpirun -np K detcheck train [OPTIONS]\n"
            "\n"
            "Trains a small decoder-only transformer on a synthetic task (or a uint16\n"
            "token file) with every reduction in a fixed order: the trajectory is the\n"
            "same bits for any number of ranks K (dividing --microbatches) and threads.\n"
            "\n"
            "Run:\n"
            "  --steps N            steps to reach (default 20)\n"
            "  --seed S             seed of weights and data (default 1)\n"
            "  --out DIR            write DIR/trajectory.jsonl and checkpoints DIR/step_NNNNNNNN/\n"
            "  --ckpt-every N       checkpoint every N steps (and always the last step)\n"
            "  --resume             continue from the latest complete checkpoint in --out\n"
            "  --resume-from DIR    continue from this checkpoint directory\n"
            "  --compress           zstd-compressed shards\n"
            "  --digest-every N     root digest in the trajectory every N steps (default 1, 0 off)\n"
            "  --mode MODE          deterministic (default) or fast (allreduce, completion order)\n"
            "  --precision P        fp32 (default) or bf16 (fp32 master weights)\n"
            "  --threads T          threads per rank (default 1)\n"
            "  --device DEV         cpu (default), cuda (the rank's GPU; exit 2 without\n"
            "                       one) or auto (the GPU if there is one): the same bits\n"
            "  --bench              run deterministic and fast mode, print the determinism tax\n"
            "  --json               summary as JSON\n"
            "  -q, --quiet          no per-step lines\n"
            "\n"
            "Model and data:\n"
            "  --preset P       tiny (the defaults below), small (GPT-2 small), medium\n"
            "                   (GPT-2 medium, 512 tokens); later flags change parts of it\n"
            "  --vocab N (256)  --layers N (2)  --width N (64)  --heads N (4)  --seq N (32)\n"
            "  --batch N        sequences per microbatch (1)\n"
            "  --microbatches M microbatches per step, a power of two (8)\n"
            "  --data FILE      uint16 little-endian token file instead of the synthetic task\n"
            "\n"
            "Optimizer (AdamW, global-norm clipping, warmup + cosine):\n"
            "  --lr (3e-3) --min-lr (3e-4) --warmup (10) --decay-steps (--steps)\n"
            "  --beta1 (0.9) --beta2 (0.95) --eps (1e-8) --weight-decay (0.1) --clip (1.0)\n"
            "\n"
            "Testing hooks:\n"
            "  --flip-bit STEP:TENSOR:INDEX   flip the low bit of one weight after STEP\n"
            "  --kill-after-ckpt STEP         SIGKILL right after the checkpoint of STEP\n"
            "  --kill-during-ckpt STEP        SIGKILL while writing the checkpoint of STEP\n"
            "\n"
            "Exit status: 0 done; 1 resumed, but a step recomputed differs from the\n"
            "trajectory record found for it; 2 trouble (bad flags, config mismatch on\n"
            "resume, another run writing into --out, a step folder detcheck did not\n"
            "write, I/O).\n");
}

typedef struct {
    bool quiet, json;
} out_ctx;

static void on_step(void *ctx, const dck_train_step_info *s) {
    out_ctx *o = ctx;
    if (o->quiet || o->json) return;
    char hex[33] = "-";
    if (s->has_root) dck_digest_to_hex(s->root, hex);
    printf("step %6ld  loss %.6f  grad_norm %.6f  lr %.3e  root %s\n", s->step, (double)s->loss,
           (double)s->grad_norm, (double)s->lr, hex);
    fflush(stdout);
}

static void on_message(void *ctx, int warning, const char *msg) {
    (void)ctx;
    if (warning)
        cli_warn("train", "%s", msg);
    else
        cli_info("train", "%s", msg);
}

typedef struct {
    bool help, json, quiet, bench;
} train_flags;

static int train_extra(void *ctx, const char *a, const char *next, int *used) {
    (void)next;
    train_flags *f = ctx;
    *used = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) return f->help = true, 1;
    if (!strcmp(a, "--json")) return f->json = true, 1;
    if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) return f->quiet = true, 1;
    if (!strcmp(a, "--bench")) return f->bench = true, 1;
    return 0;
}

static int bench(dck_train_config *c, dck_comm *comm, bool json) {
    /* Deterministic and fast mode on the same config, alternated three times; the
     * best rate of each counts (the machine may be shared). */
    c->out[0] = 0;
    c->resume = false;
    c->resume_from[0] = 0;
    /* on a device, the step alone: the root digests would bring the state
     * back to the host and hash it on the CPU every step */
    if (c->device[0] && strcmp(c->device, "cpu")) c->digest_every = 0;
    /* On a GPU a third mode: the fast mode with every linear layer's
     * products on cuBLAS SGEMM (gpu_blas.h), what a user would otherwise
     * run. It runs on "cuda" only, so that an `auto` run that fell back to
     * the CPU cannot pass the CPU's fast mode off as it; cuBLAS missing is
     * said, never filled in. */
    bool gpu_asked = !strcmp(c->device, "cuda") || !strcmp(c->device, "auto");
    char fastblas_why[256] = "";
    if (!gpu_asked && c->device[0] && strcmp(c->device, "cpu"))
        snprintf(fastblas_why, sizeof fastblas_why, "device %s has no cuBLAS", c->device);
    char asked[sizeof c->device];
    memcpy(asked, c->device, sizeof asked);
    double best[3] = {0, 0, 0};
    for (int round = 0; round < 3; round++)
        for (int mode = 0; mode < (gpu_asked ? 3 : 2); mode++) {
            if (mode == 2 && fastblas_why[0]) continue;
            c->mode = mode ? DCK_MODE_FAST : DCK_MODE_DET;
            if (mode == 2) snprintf(c->device, sizeof c->device, "cuda");
            dck_blas_fast_mode_set(mode == 2);
            dck_train_result r;
            dck_status s = dck_train_run(c, comm, NULL, &r);
            dck_blas_fast_mode_set(0);
            memcpy(c->device, asked, sizeof asked);
            if (s == DCK_ERR_NODEVICE && mode == 2) {
                snprintf(fastblas_why, sizeof fastblas_why, "%s", dck_last_error());
                continue;
            }
            if (s) return cli_fail("train", s);
            if (r.steps_per_s > best[mode]) best[mode] = r.steps_per_s;
        }
    double tax = best[1] > 0 && best[0] > 0 ? best[1] / best[0] : 0;
    /* the tax against the cuBLAS fast mode; goal within 1.5x */
    double tax_blas = best[2] > 0 && best[0] > 0 ? best[2] / best[0] : 0;
    /* the linear layers' FLOPs of one step (forward 2, backward 4 per
     * multiply-add), over the deterministic step time: a lower bound of their
     * rate (the step also runs attention, norms and the optimizer); on a GPU
     * next to a plain FP32 FMA-throughput kernel run now */
    double d = c->width, tokens = (double)c->microbatches * c->batch * c->seq;
    double lin = 6.0 * tokens * (12.0 * c->layers * d * d + d * c->vocab);
    double flops = lin * best[0], peak = 0;
    bool on_gpu = !strcmp(c->device, "cuda") || !strcmp(c->device, "auto");
    bool on_device = c->device[0] && strcmp(c->device, "cpu");
    if (on_gpu && dck_tk_cuda_fma_peak(&peak) != DCK_OK) peak = 0;
    /* The real fast baseline: what a user would otherwise run, cuBLAS SGEMM
     * on the same products (gpu_blas.h). Its absence is said, never filled in
     * with an estimate; the twin has no cuBLAS. */
    /* Two rows: FP32 (no TF32), the exact peer and the goal's, and TF32 on
     * tensor cores (cublasSetMathMode), what Ampere and Hopper users run:
     * other products, a figure only. */
    const dck_blas_math maths[2] = {DCK_BLAS_FP32, DCK_BLAS_TF32};
    double blas_s[2] = {0, 0}, blas_flops[2] = {0, 0};
    char blas_why[2][256] = {"", ""};
    int ranks = dck_comm_size(comm);
    uint32_t rank_mbs = (uint32_t)(c->microbatches / (ranks > 0 ? ranks : 1));
    for (int m = 0; m < 2; m++)
        /* one rank's microbatches on its own GPU, as the deterministic step */
        if (on_gpu && dck_blas_cuda_bench(c->layers, c->width, c->vocab, (size_t)c->batch * c->seq,
                                          rank_mbs ? rank_mbs : 1, maths[m], &blas_s[m],
                                          &blas_flops[m]) != DCK_OK)
            snprintf(blas_why[m], sizeof blas_why[m], "%s", dck_last_error());
        else if (on_device && !on_gpu)
            snprintf(blas_why[m], sizeof blas_why[m], "device %s has no cuBLAS", c->device);
    /* the FLOP share against cuBLAS on the same products: cuBLAS's time for
     * one rank's linear layers over the whole deterministic step time (a
     * lower bound of the linear layers' own share: the step holds
     * everything else too); goal within 1.5x (>= 2/3) */
    double blas_share = blas_flops[0] > 0 ? blas_s[0] * best[0] : 0;
    double tf32_share = blas_flops[1] > 0 ? blas_s[1] * best[0] : 0;
    if (cli_rank == 0) {
        int K = dck_comm_size(comm);
        if (json) {
            bool oom = false;
            json_t *o = json_object();
            cli_jset(o, "ranks", json_integer(K), &oom);
            cli_jset(o, "threads", json_integer(c->threads), &oom);
            cli_jset(o, "steps", json_integer(c->steps), &oom);
            cli_jset(o, "deterministic_steps_per_s", cli_json_number("%.3f", best[0]), &oom);
            cli_jset(o, "fast_steps_per_s", cli_json_number("%.3f", best[1]), &oom);
            cli_jset(o, "determinism_tax", cli_json_number("%.4f", tax), &oom);
            cli_jset(o, "goal", cli_json_number("%.2f", 1.10), &oom);
            /* the CPU's document stays as it was; a device run adds its figures */
            if (c->device[0] && strcmp(c->device, "cpu")) {
                cli_jset(o, "device", json_string(c->device), &oom);
                cli_jset(o, "linear_flops_per_s", cli_json_number("%.4g", flops), &oom);
            }
            if (peak > 0) {
                cli_jset(o, "fma_peak_flops_per_s", cli_json_number("%.4g", peak), &oom);
                cli_jset(o, "linear_fraction_of_peak", cli_json_number("%.4f", flops / peak), &oom);
                cli_jset(o, "fma_peak_fraction_cap", cli_json_number("%.2f", 0.5), &oom);
            }
            if (blas_flops[0] > 0) {
                cli_jset(o, "cublas_linear_flops_per_s", cli_json_number("%.4g", blas_flops[0]), &oom);
                cli_jset(o, "cublas_linear_step_s", cli_json_number("%.6g", blas_s[0]), &oom);
                cli_jset(o, "linear_fraction_of_cublas", cli_json_number("%.4f", blas_share), &oom);
                cli_jset(o, "cublas_goal", cli_json_number("%.4f", 1.0 / 1.5), &oom);
            } else if (blas_why[0][0]) {
                cli_jset(o, "cublas_unavailable", json_string(blas_why[0]), &oom);
            }
            if (blas_flops[1] > 0) {
                cli_jset(o, "cublas_tf32_linear_flops_per_s", cli_json_number("%.4g", blas_flops[1]), &oom);
                cli_jset(o, "cublas_tf32_linear_step_s", cli_json_number("%.6g", blas_s[1]), &oom);
                cli_jset(o, "linear_fraction_of_cublas_tf32", cli_json_number("%.4f", tf32_share), &oom);
            } else if (blas_why[1][0]) {
                cli_jset(o, "cublas_tf32_unavailable", json_string(blas_why[1]), &oom);
            }
            if (tax_blas > 0) {
                cli_jset(o, "fast_cublas_steps_per_s", cli_json_number("%.3f", best[2]), &oom);
                cli_jset(o, "determinism_tax_cublas", cli_json_number("%.4f", tax_blas), &oom);
                cli_jset(o, "goal_cublas", cli_json_number("%.2f", 1.5), &oom);
            } else if (fastblas_why[0]) {
                cli_jset(o, "fast_cublas_unavailable", json_string(fastblas_why), &oom);
            }
            dck_status s = cli_json_print(o, CLI_JSON_COMPACT, oom);
            if (s) return cli_fail("train", s);
        } else
            printf("ranks %d, threads %d, %ld steps\n"
                   "deterministic  %8.2f steps/s\n"
                   "fast           %8.2f steps/s\n"
                   "determinism tax %.3fx (goal <= 1.10x: %s)\n",
                   K, c->threads, c->steps, best[0], best[1], tax, tax <= 1.10 ? "met" : "missed");
        if (!json) {
            printf("linear layers  %8.3g FLOP/s (deterministic step)\n", flops);
            /* the kernels are built with --fmad=false: each multiply-add
             * is a multiply and an add, two instructions where the peak
             * kernel's FMA is one, so 50% of the peak is their ceiling */
            if (peak > 0)
                printf("FP32 FMA peak  %8.3g FLOP/s (measured now; --fmad=false caps the share at "
                       "50%%): linear layers at %.1f%% (goal >= 25%%: %s)\n",
                       peak, 100.0 * flops / peak, flops >= 0.25 * peak ? "met" : "missed");
            if (blas_flops[0] > 0)
                printf("cuBLAS FP32 (no TF32) %8.3g FLOP/s (same products, default math mode, "
                       "%.3g ms a step): linear layers at %.1f%% (goal >= 66.7%%, within 1.5x: %s)\n",
                       blas_flops[0], 1e3 * blas_s[0], 100.0 * blas_share,
                       blas_share * 1.5 >= 1.0 ? "met" : "missed");
            else if (blas_why[0][0])
                printf("cuBLAS FP32 (no TF32) unavailable (%s)\n", blas_why[0]);
            if (blas_flops[1] > 0)
                printf("cuBLAS TF32 %8.3g FLOP/s (same shapes on tensor cores, "
                       "CUBLAS_TF32_TENSOR_OP_MATH: 10-bit mantissas, other products; %.3g ms a "
                       "step): linear layers at %.1f%%, a figure, no goal\n",
                       blas_flops[1], 1e3 * blas_s[1], 100.0 * tf32_share);
            else if (blas_why[1][0])
                printf("cuBLAS TF32 unavailable (%s)\n", blas_why[1]);
            if (tax_blas > 0)
                printf("fast (cuBLAS)  %8.2f steps/s (fast mode, linear layers on cuBLAS SGEMM)\n"
                       "determinism tax against cuBLAS %.3fx (goal <= 1.50x: %s)\n",
                       best[2], tax_blas, tax_blas <= 1.5 ? "met" : "missed");
            else if (fastblas_why[0])
                printf("fast (cuBLAS)  unavailable (%s)\n", fastblas_why);
        }
    }
    return 0;
}

int cmd_train(int argc, char **argv) {
    dck_train_config c;
    dck_train_config_init(&c);
    train_flags f = {0};
    int rc = cli_parse_train_args("train", argc, argv, &c, train_extra, &f);
    if (f.help) {
        usage(stdout);
        return 0;
    }
    if (rc) return rc;
    cli_quiet = f.quiet;
    dck_comm *comm = NULL;
    dck_status s = dck_comm_init(&argc, &argv, &comm);
    if (s) return cli_fail("train", s);
    cli_rank = dck_comm_rank(comm);
    if (f.bench) {
        rc = bench(&c, comm, f.json);
        dck_comm_finalize(comm);
        return rc;
    }
    out_ctx o = {f.quiet, f.json};
    dck_train_hooks hooks = {.ctx = &o, .on_step = on_step, .on_message = on_message};
    dck_train_result r;
    s = dck_train_run(&c, comm, &hooks, &r);
    if (s) {
        /* a collective found a rank missing, maybe rank 0: every survivor says so */
        if (dck_comm_broken(comm)) cli_rank = 0;
        rc = cli_fail("train", s);
        dck_comm_finalize(comm);
        return rc;
    }
    if (cli_rank == 0) {
        long done = r.last_step - r.first_step + 1;
        if (f.json) {
            char hex[33];
            if (r.has_root) dck_digest_to_hex(r.final_root, hex);
            bool oom = false;
            json_t *o = json_object();
            cli_jset(o, "ranks", json_integer(dck_comm_size(comm)), &oom);
            cli_jset(o, "first_step", json_integer(r.first_step), &oom);
            cli_jset(o, "last_step", json_integer(r.last_step), &oom);
            cli_jset(o, "first_loss", cli_json_number("%.9g", (double)r.first_loss), &oom);
            cli_jset(o, "last_loss", cli_json_number("%.9g", (double)r.last_loss), &oom);
            cli_jset(o, "seconds", cli_json_number("%.3f", r.seconds), &oom);
            cli_jset(o, "steps_per_s", cli_json_number("%.3f", r.steps_per_s), &oom);
            cli_jset(o, "root", r.has_root ? json_string(hex) : json_null(), &oom);
            if ((s = cli_json_print(o, CLI_JSON_COMPACT, oom))) rc = cli_fail("train", s);
        } else if (done > 0)
            cli_info("train", "steps %ld..%ld on %d rank%s: loss %.4f -> %.4f, %.2f steps/s",
                     r.first_step, r.last_step, dck_comm_size(comm),
                     dck_comm_size(comm) > 1 ? "s" : "", (double)r.first_loss,
                     (double)r.last_loss, r.steps_per_s);
        else
            cli_info("train", "nothing to do: already at step %ld", r.last_step);
        /* the run reached its end, but did not reproduce what it resumed: the
         * verdict "different" of the exit code contract */
        if (r.recheck_step > 0) {
            cli_error("train", "%s: not reproduced by this run", r.recheck_what);
            if (rc == 0) rc = DCK_EXIT_DIFFERENT;
        }
    }
    dck_comm_finalize(comm);
    return rc;
}

/* The training loop without MPI: gradients against finite differences,
 * bitwise independence of the thread count, fast mode really differing,
 * the loss falling, ZeRO-1 partition, schedule, data, config. */
#include "testutil.h"
#include "train/train.h"

#include <math.h>
#include <string.h>

static dck_train_config tiny(void) {
    dck_train_config c;
    dck_train_config_init(&c);
    c.vocab = 32;
    c.layers = 1;
    c.width = 16;
    c.heads = 2;
    c.seq = 8;
    c.batch = 2;
    c.microbatches = 4;
    c.steps = 4;
    c.warmup = 2;
    return c;
}

START_TEST(gradient_matches_finite_differences) {
    dck_train_config c = tiny();
    c.layers = 2;
    c.vocab = 11;
    c.width = 8;
    c.seq = 5;
    dck_model m;
    ck_assert_int_eq(dck_model_init(&m, &c), DCK_OK);
    float *w = calloc(m.total, sizeof(float)), *g = calloc(m.total, sizeof(float)),
          *g2 = calloc(m.total, sizeof(float));
    /* larger weights than the default init, so every path carries gradient */
    for (size_t i = 0; i < m.total; i++)
        w[i] = ((float)(dck_philox_u32(5, (uint32_t)i, 0, 0, 0) >> 8) / 16777216.0f - 0.5f) * 0.8f;
    for (size_t t = 0; t < m.nparams; t++)
        if (strstr(m.params[t].name, "ln") && strstr(m.params[t].name, "weight"))
            for (size_t e = 0; e < m.params[t].numel; e++) w[m.params[t].offset + e] += 1.0f;
    uint16_t tok[2 * 6];
    for (int i = 0; i < 12; i++) tok[i] = (uint16_t)((i * 7 + 3) % 11);
    dck_workspace *ws = dck_workspace_create(&m);
    dck_model_microbatch(&m, ws, w, tok, g);
    double worst = 0;
    for (size_t t = 0; t < m.nparams; t++) {
        const dck_param *p = &m.params[t];
        for (size_t k = 0; k < 3; k++) {
            size_t i = p->offset + (k * 7919) % p->numel;
            float keep = w[i], h = 1e-2f;
            w[i] = keep + h;
            double lp = dck_model_microbatch(&m, ws, w, tok, g2);
            w[i] = keep - h;
            double lm = dck_model_microbatch(&m, ws, w, tok, g2);
            w[i] = keep;
            double num = (lp - lm) / (2.0 * h);
            double err = fabs(num - g[i]);
            double tol = 2e-3 + 3e-2 * fabs(num);
            if (err / (tol) > worst) worst = err / tol;
            ck_assert_msg(err <= tol, "%s[%zu]: analytic %g, numeric %g", p->name,
                          i - p->offset, (double)g[i], num);
        }
    }
    printf("gradient check: worst error %.2f of tolerance\n", worst);
    dck_workspace_free(ws);
    free(w);
    free(g);
    free(g2);
    dck_model_release(&m);
}
END_TEST

static dck_train_result run(dck_train_config c) {
    dck_train_result r;
    ck_assert_int_eq(dck_train_run(&c, NULL, NULL, &r), DCK_OK);
    return r;
}

START_TEST(threads_do_not_change_bits) {
    for (int prec = 0; prec < 2; prec++) {
        dck_train_config c = tiny();
        c.precision = prec ? DCK_PREC_BF16 : DCK_PREC_FP32;
        c.threads = 1;
        dck_train_result a = run(c);
        c.threads = 2;
        dck_train_result b = run(c);
        c.threads = 3;
        dck_train_result d = run(c);
        ck_assert(dck_digest_equal(a.final_root, b.final_root));
        ck_assert(dck_digest_equal(a.final_root, d.final_root));
        ck_assert_uint_eq(dck_f32_bits(a.last_loss), dck_f32_bits(b.last_loss));
        ck_assert_uint_eq(dck_f32_bits(a.last_loss), dck_f32_bits(d.last_loss));
        /* and the precision matters: bf16 is not fp32 */
        if (prec) {
            dck_train_config f = tiny();
            ck_assert(!dck_digest_equal(run(f).final_root, a.final_root));
        }
    }
}
END_TEST

START_TEST(fast_mode_differs) {
    /* sequential completion-order sums are not the tree: other bits */
    dck_train_config c = tiny();
    c.microbatches = 8;
    dck_train_result det = run(c);
    c.mode = DCK_MODE_FAST;
    dck_train_result fast = run(c);
    ck_assert(!dck_digest_equal(det.final_root, fast.final_root));
    ck_assert(fabsf(det.last_loss - fast.last_loss) < 1e-3f); /* same training, other rounding */
}
END_TEST

START_TEST(loss_falls_by_half) {
    dck_train_config c = tiny();
    c.width = 32;
    c.seq = 16;
    c.steps = 200;
    c.warmup = 10;
    c.lr = 1e-2f;
    c.min_lr = 1e-3f;
    c.digest_every = 0;
    dck_train_result r = run(c);
    printf("loss %.4f -> %.4f in %ld steps (%.1f steps/s)\n", (double)r.first_loss,
           (double)r.last_loss, r.last_step, r.steps_per_s);
    ck_assert_float_lt(r.last_loss, r.first_loss * 0.5f);
}
END_TEST

START_TEST(zero_partition_rows) {
    dck_train_config c;
    dck_train_config_init(&c);
    dck_model m;
    ck_assert_int_eq(dck_model_init(&m, &c), DCK_OK);
    for (int K = 1; K <= 8; K++) {
        size_t st[9];
        dck_zero_partition(&m, K, st);
        ck_assert_uint_eq(st[0], 0);
        ck_assert_uint_eq(st[K], m.total);
        for (int r = 1; r < K; r++) {
            ck_assert_uint_ge(st[r], st[r - 1]);
            /* a row start of some tensor */
            bool row = false;
            for (size_t t = 0; t < m.nparams; t++) {
                const dck_param *p = &m.params[t];
                if (st[r] >= p->offset && st[r] < p->offset + p->numel)
                    row = (st[r] - p->offset) % p->row == 0;
            }
            ck_assert(row);
            /* balanced within one row of the largest tensor */
            ck_assert_uint_le(st[r] - st[r - 1], m.total / (size_t)K + 2 * 256);
        }
    }
    dck_model_release(&m);
}
END_TEST

START_TEST(lr_schedule) {
    dck_train_config c;
    dck_train_config_init(&c);
    c.lr = 1e-2f;
    c.min_lr = 1e-3f;
    c.warmup = 10;
    c.steps = 110;
    ck_assert_float_eq(dck_lr_at(&c, 5), (float)(1e-2f * 0.5));
    ck_assert_float_eq(dck_lr_at(&c, 10), 1e-2f);
    ck_assert_float_eq_tol(dck_lr_at(&c, 60), 5.5e-3f, 1e-8f);
    ck_assert_float_eq(dck_lr_at(&c, 110), 1e-3f);
    ck_assert_float_eq(dck_lr_at(&c, 500), 1e-3f);
    c.decay_steps = 210;
    ck_assert_float_eq_tol(dck_lr_at(&c, 110), 5.5e-3f, 1e-8f);
}
END_TEST

START_TEST(data_is_indexed) {
    dck_train_config c = tiny();
    dck_data *d;
    ck_assert_int_eq(dck_data_open(&c, &d), DCK_OK);
    uint16_t a[9], b[9], e[9];
    dck_data_sample(d, 12345, a);
    dck_data_sample(d, 7, e);
    dck_data_sample(d, 12345, b);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    ck_assert(memcmp(a, e, sizeof a) != 0);
    for (int i = 0; i < 9; i++) ck_assert_uint_lt(a[i], 32);
    dck_data_free(d);

    char *dir = tu_tmpdir();
    char *p = tu_path(dir, "tokens.bin");
    uint16_t toks[100];
    for (int i = 0; i < 100; i++) toks[i] = (uint16_t)(i % 30);
    tu_write(p, toks, sizeof toks);
    snprintf(c.data, sizeof c.data, "%s", p);
    ck_assert_int_eq(dck_data_open(&c, &d), DCK_OK);
    dck_data_sample(d, 3, a);
    for (int i = 1; i < 9; i++) ck_assert_uint_eq(a[i], (a[i - 1] + 1) % 30);
    dck_data_free(d);
    toks[50] = 40; /* outside vocab 32 */
    tu_write(p, toks, sizeof toks);
    ck_assert_int_eq(dck_data_open(&c, &d), DCK_ERR_FORMAT);
    ck_assert(strstr(dck_last_error(), "outside the vocabulary"));
    tu_write(p, toks, 7);
    ck_assert_int_eq(dck_data_open(&c, &d), DCK_ERR_FORMAT);
    free(p);
    tu_tmpdir_free(dir);
}
END_TEST

START_TEST(config_parse_and_match) {
    dck_train_config c;
    dck_train_config_init(&c);
    ck_assert_int_eq(dck_train_config_set(&c, "width", "48"), DCK_OK);
    ck_assert_int_eq(dck_train_config_set(&c, "width", "4x"), DCK_ERR_INVALID);
    ck_assert_int_eq(dck_train_config_set(&c, "precision", "fp16"), DCK_ERR_INVALID);
    ck_assert_int_eq(dck_train_config_set(&c, "nope", "1"), DCK_ERR_INVALID);
    ck_assert_int_eq(dck_train_config_set(&c, "flip-bit", "3:model.wte.weight:17"), DCK_OK);
    ck_assert_int_eq(c.flip_step, 3);
    ck_assert_str_eq(c.flip_tensor, "model.wte.weight");
    ck_assert_uint_eq(c.flip_index, 17);
    ck_assert_int_eq(dck_train_config_set(&c, "microbatches", "6"), DCK_OK);
    ck_assert_int_eq(dck_train_config_check(&c), DCK_ERR_INVALID);
    ck_assert(strstr(dck_last_error(), "power of two"));
    dck_train_config_init(&c);
    ck_assert_int_eq(dck_train_config_set(&c, "heads", "5"), DCK_OK);
    ck_assert_int_eq(dck_train_config_check(&c), DCK_ERR_INVALID);

    dck_train_config a;
    dck_train_config_init(&a);
    char *ja;
    ck_assert_int_eq(dck_train_config_json(&a, &ja), DCK_OK);
    ck_assert_int_eq(dck_train_config_match(&a, ja, "ck"), DCK_OK);
    dck_train_config b = a;
    b.width = 32;
    b.lr = 1e-3f;
    b.threads = 4; /* not identity */
    ck_assert_int_eq(dck_train_config_match(&b, ja, "ck"), DCK_ERR_MISMATCH);
    ck_assert(strstr(dck_last_error(), "width: checkpoint 64, this run 32"));
    ck_assert(strstr(dck_last_error(), "lr"));
    ck_assert(!strstr(dck_last_error(), "threads"));
    dck_train_config r;
    dck_train_config_init(&r);
    r.width = 8;
    ck_assert_int_eq(dck_train_config_from_json(&r, ja, "ck"), DCK_OK);
    ck_assert_int_eq(dck_train_config_match(&r, ja, "ck"), DCK_OK);
    free(ja);
}
END_TEST

/* A value other than the default for every option of the table: a new
 * option fails config_flags_round_trip until it has one here. */
static const struct {
    const char *name, *value;
} samples[] = {
    {"vocab", "300"},          {"layers", "3"},          {"width", "96"},
    {"heads", "6"},            {"seq", "17"},            {"batch", "5"},
    {"microbatches", "1024"},  {"seed", "18446744073709551615"},
    {"lr", "0.00123456789"},   {"min-lr", "1.17549435e-38"},
    {"beta1", "0.999998987"},  {"beta2", "0.1"},         {"eps", "-0"},
    {"weight-decay", "9.99999905"}, {"clip", "1e30"},    {"warmup", "1000000000000"},
    {"decay-steps", "77"},     {"precision", "bf16"},    {"mode", "fast"},
    {"data", "tok en's.bin"},  {"steps", "0"},           {"threads", "256"},
    {"digest-every", "0"},     {"compress", NULL},       {"out", "run dir"},
    {"resume", NULL},          {"resume-from", "a/step_00000003"},
    {"ckpt-every", "3"},       {"flip-bit", "4:model.blocks.1.attn.qkv.weight:123"},
    {"kill-after-ckpt", "2"},  {"kill-during-ckpt", "9"},
    {"device", "twin"},        {"preset", "small"},
};
#define NSAMPLES (sizeof samples / sizeof samples[0])

/* config -> flags -> dck_train_config_set on a fresh config -> the same
 * bytes. */
static void round_trip(const dck_train_config *c, dck_train_scope upto, const char *what) {
    dck_train_flag *f;
    size_t n;
    ck_assert_int_eq(dck_train_config_to_flags(c, upto, &f, &n), DCK_OK);
    dck_train_config d;
    dck_train_config_init(&d);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(dck_train_config_set(&d, f[i].name, f[i].value) == DCK_OK, "%s: --%s %s: %s",
                      what, f[i].name, f[i].value ? f[i].value : "", dck_last_error());
    free(f);
    ck_assert_msg(memcmp(c, &d, sizeof d) == 0, "%s: the config does not survive its flags", what);
}

START_TEST(config_flags_round_trip) {
    /* every option of the table has a sample */
    size_t nopts = 0;
    for (const char *name; (name = dck_train_option_name(nopts)); nopts++) {
        size_t k = 0;
        while (k < NSAMPLES && strcmp(samples[k].name, name)) k++;
        ck_assert_msg(k < NSAMPLES, "option --%s has no sample in check_train.c", name);
    }
    ck_assert_uint_eq(nopts, NSAMPLES);
    /* each option alone, then all of them */
    dck_train_config all;
    dck_train_config_init(&all);
    for (size_t k = 0; k < NSAMPLES; k++) {
        dck_train_config c;
        dck_train_config_init(&c);
        ck_assert_msg(dck_train_config_set(&c, samples[k].name, samples[k].value) == DCK_OK, "--%s: %s",
                      samples[k].name, dck_last_error());
        ck_assert_int_eq(dck_train_config_set(&all, samples[k].name, samples[k].value), DCK_OK);
        dck_train_config d;
        dck_train_config_init(&d);
        ck_assert_msg(memcmp(&c, &d, sizeof d) != 0, "sample of --%s is its default", samples[k].name);
        round_trip(&c, DCK_TRAIN_INSTANCE, samples[k].name);
    }
    round_trip(&all, DCK_TRAIN_INSTANCE, "every option");
    /* floats bit for bit: random normal values across each float option's range */
    static const char *const floats[] = {"lr", "min-lr", "beta1", "beta2", "eps", "weight-decay", "clip"};
    for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++) {
        int tried = 0;
        for (uint32_t i = 0; tried < 3000; i++) {
            uint32_t bits = dck_philox_u32(7, (uint32_t)k, i, 0, 0) & 0x7fffffffu;
            float v = dck_f32_from_bits(bits);
            if (!isnormal(v)) continue;
            char text[32];
            dck_float_text(v, text, sizeof text);
            dck_train_config c;
            dck_train_config_init(&c);
            if (dck_train_config_set(&c, floats[k], text) != DCK_OK) continue; /* out of range */
            tried++;
            round_trip(&c, DCK_TRAIN_IDENTITY, floats[k]);
        }
    }
    /* the scopes: identity, then the mode, then how to run, then the rest */
    dck_train_flag *f;
    size_t n, prev = 0;
    for (int sc = DCK_TRAIN_IDENTITY; sc <= DCK_TRAIN_INSTANCE; sc++) {
        ck_assert_int_eq(dck_train_config_to_flags(&all, (dck_train_scope)sc, &f, &n), DCK_OK);
        ck_assert_uint_gt(n, prev);
        prev = n;
        free(f);
    }
    ck_assert_uint_eq(n, NSAMPLES);
    /* the replay command's form: what bisect printed before there was a table */
    dck_train_config c;
    dck_train_config_init(&c);
    c.decay_steps = 7;
    char *line = dck_train_config_flags(&c, DCK_TRAIN_NUMERICS);
    ck_assert_str_eq(line, "--vocab 256 --layers 2 --width 64 --heads 4 --seq 32 --batch 1 "
                           "--microbatches 8 --seed 1 --lr 0.003 --min-lr 0.0003 --beta1 0.9 "
                           "--beta2 0.95 --eps 1e-08 --weight-decay 0.1 --clip 1 --warmup 10 "
                           "--decay-steps 7 --precision fp32");
    free(line);
    c.mode = DCK_MODE_FAST;
    snprintf(c.data, sizeof c.data, "%s", "tok en's.bin");
    c.threads = 3; /* not replayed */
    line = dck_train_config_flags(&c, DCK_TRAIN_NUMERICS);
    ck_assert_msg(strstr(line, " --precision fp32 --mode fast --data 'tok en'\\''s.bin'") != NULL, "%s", line);
    ck_assert(strstr(line, "threads") == NULL);
    free(line);
}
END_TEST

START_TEST(config_limits) {
    /* the option table's range of --microbatches is the stack arrays' limit */
    dck_train_config c;
    dck_train_config_init(&c);
    char lim[32];
    snprintf(lim, sizeof lim, "%d", DCK_TRAIN_MAX_MICROBATCHES);
    ck_assert_int_eq(dck_train_config_set(&c, "microbatches", lim), DCK_OK);
    ck_assert_int_eq(dck_train_config_check(&c), DCK_OK);
    snprintf(lim, sizeof lim, "%d", 2 * DCK_TRAIN_MAX_MICROBATCHES);
    ck_assert_int_eq(dck_train_config_set(&c, "microbatches", lim), DCK_ERR_INVALID);
    ck_assert_msg(strstr(dck_last_error(), "--microbatches '2048': not an integer in [1, 1024]"), "%s",
                  dck_last_error());
    /* a config made in code meets the same range in the check */
    c.microbatches = 2 * DCK_TRAIN_MAX_MICROBATCHES;
    ck_assert_int_eq(dck_train_config_check(&c), DCK_ERR_INVALID);
    ck_assert_msg(strstr(dck_last_error(), "--microbatches '2048': not an integer in [1, 1024]"), "%s",
                  dck_last_error());
    dck_train_result r;
    ck_assert_int_eq(dck_train_run(&c, NULL, NULL, &r), DCK_ERR_INVALID);
    dck_train_config_init(&c);
    c.threads = 0;
    ck_assert_int_eq(dck_train_config_check(&c), DCK_ERR_INVALID);
    ck_assert(strstr(dck_last_error(), "--threads '0'"));
    dck_train_config_init(&c);
    c.lr = 11.0f;
    ck_assert_int_eq(dck_train_config_check(&c), DCK_ERR_INVALID);
    ck_assert(strstr(dck_last_error(), "--lr '11': not a number in [0, 10]"));
    /* ranks: the limit by name, not "do not divide" */
    dck_train_config_init(&c);
    c.microbatches = DCK_TRAIN_MAX_MICROBATCHES;
    ck_assert_int_eq(dck_train_config_ranks(&c, DCK_TRAIN_MAX_RANKS), DCK_OK);
    ck_assert_int_eq(dck_train_config_ranks(&c, 2 * DCK_TRAIN_MAX_RANKS), DCK_ERR_LIMIT);
    ck_assert_msg(strstr(dck_last_error(), "512 ranks are beyond this tool's limit of 256 ranks"), "%s",
                  dck_last_error());
    ck_assert(!strstr(dck_last_error(), "divide"));
    c.microbatches = 8;
    ck_assert_int_eq(dck_train_config_ranks(&c, 3), DCK_ERR_INVALID);
    ck_assert(strstr(dck_last_error(), "3 ranks do not divide --microbatches 8"));
    ck_assert_int_eq(dck_train_config_ranks(&c, 8), DCK_OK);
}
END_TEST

START_TEST(config_errors_have_messages) {
    /* a token file that cannot be read: I/O with its name, never a bare status */
    dck_train_config c;
    dck_train_config_init(&c);
    snprintf(c.data, sizeof c.data, "%s", "/nonexistent/detcheck-tokens.bin");
    char *json = NULL;
    ck_assert_int_eq(dck_train_config_json(&c, &json), DCK_ERR_IO);
    ck_assert_ptr_null(json);
    ck_assert(strstr(dck_last_error(), "/nonexistent/detcheck-tokens.bin"));
    dck_train_config a;
    dck_train_config_init(&a);
    ck_assert_int_eq(dck_train_config_json(&a, &json), DCK_OK);
    ck_assert_int_eq(dck_train_config_match(&c, json, "ck"), DCK_ERR_IO);
    ck_assert(strstr(dck_last_error(), "/nonexistent/detcheck-tokens.bin"));
    free(json);
}
END_TEST

START_TEST(trajectory_root_matches_checkpoint) {
    /* the root in the trajectory (from fragment partials of the slices) is
     * the root over the model and optimizer tensors of the checkpoint that
     * detcheck hash computes from the files */
    for (int prec = 0; prec < 2; prec++) {
        char *dir = tu_tmpdir();
        dck_train_config c = tiny();
        c.precision = prec ? DCK_PREC_BF16 : DCK_PREC_FP32;
        snprintf(c.out, sizeof c.out, "%s/run", dir);
        dck_train_result r = run(c);
        ck_assert(r.has_root);
        char *mp = tu_path(dir, "run/step_00000004/manifest.json");
        dck_manifest *m;
        ck_assert_int_eq(dck_manifest_load(mp, &m), DCK_OK);
        const char *names[512];
        dck_digest dg[512];
        size_t n = 0, other = 0;
        for (size_t i = 0; i < dck_manifest_tensor_count(m); i++) {
            const dck_manifest_tensor *t = dck_manifest_tensor_at(m, i);
            if (t->group == DCK_GROUP_WEIGHTS || t->group == DCK_GROUP_OPTIMIZER) {
                names[n] = t->name;
                dg[n++] = t->digest;
            } else {
                other++;
            }
        }
        ck_assert_uint_eq(other, 5); /* rng x2, step, scheduler, config */
        ck_assert_uint_eq(n, (prec ? 4 : 3) * (5 + 12 * (size_t)c.layers));
        ck_assert(dck_digest_equal(dck_root_digest(names, dg, n), r.final_root));
        dck_manifest_free(m);
        free(mp);
        tu_tmpdir_free(dir);
    }
}
END_TEST

/* Golden trajectory: the root and the loss at step 20 of 20-step runs, as
 * this trainer computed them before its kernels were vectorised. Any change
 * in the order or operands of a floating-point operation changes them. The
 * odd shapes reach every remainder of the kernels' blocks (width, 3 width,
 * 4 width and vocab not multiples of 4 or 8, head size 5 and 18, seq 7 and 13). */
static const struct {
    const char *what;
    int vocab, layers, width, heads, seq, batch, microbatches, threads;
    dck_precision precision;
    const char *root;
    uint32_t loss_bits;
} golden[] = {
    {"default", 256, 2, 64, 4, 32, 1, 8, 1, DCK_PREC_FP32, "45af94125d8a41f86ad967d632a44d99", 0x4096e54au},
    {"default bf16", 256, 2, 64, 4, 32, 1, 8, 1, DCK_PREC_BF16, "de7475f8ce8fae50e45fbace55990eb0", 0x4096e74bu},
    {"default, 2 threads", 256, 2, 64, 4, 32, 1, 8, 2, DCK_PREC_FP32, "45af94125d8a41f86ad967d632a44d99", 0x4096e54au},
    {"batch 2 x 4 microbatches", 256, 2, 64, 4, 32, 2, 4, 2, DCK_PREC_FP32, "c77e2d25d04216349cf32740ee2cadc8", 0x4096e54au},
    {"odd 1", 37, 2, 15, 3, 7, 3, 2, 1, DCK_PREC_FP32, "bb0d77c81e54fa1f77b4db4438dbaf3a", 0x40588172u},
    {"odd 1 bf16", 37, 2, 15, 3, 7, 3, 2, 2, DCK_PREC_BF16, "3c2c081a78266262b56bf622c570af5d", 0x40588230u},
    {"odd 2", 61, 1, 36, 2, 13, 1, 4, 1, DCK_PREC_FP32, "721c45273cdd301b4817c187a34b6560", 0x4069769fu},
    {"odd 2 bf16", 61, 1, 36, 2, 13, 1, 4, 1, DCK_PREC_BF16, "5392c5f71c9212fde8376cd0e062d603", 0x40697382u},
};

START_TEST(golden_trajectory_at_step_20) {
    for (size_t k = 0; k < sizeof golden / sizeof golden[0]; k++) {
        dck_train_config c;
        dck_train_config_init(&c);
        c.vocab = golden[k].vocab;
        c.layers = golden[k].layers;
        c.width = golden[k].width;
        c.heads = golden[k].heads;
        c.seq = golden[k].seq;
        c.batch = golden[k].batch;
        c.microbatches = golden[k].microbatches;
        c.threads = golden[k].threads;
        c.precision = golden[k].precision;
        c.steps = 20;
        dck_train_result r = run(c);
        ck_assert(r.has_root);
        char hex[33];
        dck_digest_to_hex(r.final_root, hex);
        ck_assert_msg(!strcmp(hex, golden[k].root), "%s: root at step 20 is %s, golden %s",
                      golden[k].what, hex, golden[k].root);
        ck_assert_msg(dck_f32_bits(r.last_loss) == golden[k].loss_bits,
                      "%s: loss bits at step 20 are %08x, golden %08x", golden[k].what,
                      dck_f32_bits(r.last_loss), golden[k].loss_bits);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, gradient_matches_finite_differences);
    tcase_add_test(tc, threads_do_not_change_bits);
    tcase_add_test(tc, fast_mode_differs);
    tcase_add_test(tc, loss_falls_by_half);
    tcase_add_test(tc, zero_partition_rows);
    tcase_add_test(tc, lr_schedule);
    tcase_add_test(tc, data_is_indexed);
    tcase_add_test(tc, config_parse_and_match);
    tcase_add_test(tc, config_flags_round_trip);
    tcase_add_test(tc, config_limits);
    tcase_add_test(tc, config_errors_have_messages);
    tcase_add_test(tc, trajectory_root_matches_checkpoint);
    tcase_add_test(tc, golden_trajectory_at_step_20);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

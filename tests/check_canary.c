/* detcheck canary's library (src/train/canary.c, train_inject.c) on one
 * rank: the --inject grammar, presets, the taps leaving an untapped run's
 * bits alone, a fault at each point named with its step, tensor, element
 * count and bit, and golden files round-tripping. The 4-rank cases are
 * tests/cli/test_canary.sh and test_slurm.sh. */
#include "testutil.h"
#include "train/canary.h"

START_TEST(inject_grammar) {
    dck_canary_inject j;
    ck_assert_int_eq(dck_canary_inject_parse("3:12:grad.wte.weight:40:31", &j), DCK_OK);
    ck_assert(j.on);
    ck_assert_int_eq(j.rank, 3);
    ck_assert_int_eq(j.step, 12);
    ck_assert_str_eq(j.tensor, "grad.wte.weight");
    ck_assert_uint_eq(j.index, 40);
    ck_assert_int_eq(j.bit, 31);
    static const char *const bad[] = {"", "1", "1:2:x:3", "1:2:x:3:4:5", "a:2:x:3:4", "1:0:x:3:4",
                                      "1:2::3:4", "1:2:x:-3:4", "1:2:x:3:32", "1:2:x:3:",
                                      "-1:2:x:3:4", "1:2:x:99999999999999999999999:4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(dck_canary_inject_parse(bad[i], &j) == DCK_ERR_INVALID, "'%s' accepted", bad[i]);
        ck_assert_msg(strstr(dck_last_error(), "--inject") != NULL, "'%s': %s", bad[i],
                      dck_last_error());
    }
}
END_TEST

START_TEST(presets_and_checks) {
    dck_train_config c;
    dck_train_config_init(&c);
    for (size_t i = 0; dck_canary_preset_name(i); i++) {
        ck_assert_int_eq(dck_canary_preset(&c, dck_canary_preset_name(i)), DCK_OK);
        ck_assert_int_eq(dck_train_config_check(&c), DCK_OK);
        ck_assert_ptr_nonnull(dck_canary_preset_help(i));
    }
    ck_assert_int_eq(dck_canary_preset(&c, "nope"), DCK_ERR_INVALID);
    ck_assert_int_eq(dck_canary_preset(&c, "tiny"), DCK_OK);
    dck_canary_inject j;
    static const struct {
        const char *spec;
        dck_status want;
    } cases[] = {
        {"0:1:model.wte.weight:2047:0", DCK_OK},
        {"0:1:model.wte.weight:2048:0", DCK_ERR_INVALID},
        {"0:8:optimizer.exp_avg_sq.lm_head.weight:0:0", DCK_OK},
        {"0:9:optimizer.exp_avg_sq.lm_head.weight:0:0", DCK_ERR_INVALID},
        {"0:1:grad.blocks.1.attn.proj.bias:31:0", DCK_OK},
        {"0:1:grad.blocks.2.attn.proj.bias:0:0", DCK_ERR_INVALID},
        {"0:1:weights.wte.weight:0:0", DCK_ERR_INVALID},
        {"0:1:activations:24735:0", DCK_OK},
        {"0:1:activations:24736:0", DCK_ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_int_eq(dck_canary_inject_parse(cases[i].spec, &j), DCK_OK);
        ck_assert_msg(dck_canary_inject_check(&c, &j) == cases[i].want, "%s: %s", cases[i].spec,
                      dck_last_error());
    }
}
END_TEST

/* Counts the taps and changes nothing. */
static int tap_calls[DCK_TAP_COUNT];
static void count_taps(void *ctx, const dck_model *m, dck_tap_point what, long step, float *data,
                       size_t lo, size_t hi) {
    (void)ctx, (void)m, (void)step, (void)data, (void)lo, (void)hi;
    __atomic_fetch_add(&tap_calls[what], 1, __ATOMIC_RELAXED);
}

START_TEST(taps_change_no_bit) {
    dck_train_config c;
    dck_train_config_init(&c);
    dck_canary_preset(&c, "tiny");
    c.threads = 2;
    dck_train_result plain, tapped;
    ck_assert_int_eq(dck_train_run(&c, NULL, NULL, &plain), DCK_OK);
    dck_train_tap tap = {.on_state = count_taps};
    dck_train_hooks hooks = {.tap = &tap};
    memset(tap_calls, 0, sizeof tap_calls);
    ck_assert_int_eq(dck_train_run(&c, NULL, &hooks, &tapped), DCK_OK);
    ck_assert(dck_digest_equal(plain.final_root, tapped.final_root));
    ck_assert_int_eq(tap_calls[DCK_TAP_WEIGHTS], c.steps);
    ck_assert_int_eq(tap_calls[DCK_TAP_GRADIENTS], c.steps);
    ck_assert_int_eq(tap_calls[DCK_TAP_EXP_AVG], c.steps);
    ck_assert_int_eq(tap_calls[DCK_TAP_EXP_AVG_SQ], c.steps);
    /* one call per sequence: microbatches x batch per step */
    ck_assert_int_eq(tap_calls[DCK_TAP_ACTIVATIONS], c.steps * c.microbatches * c.batch);
}
END_TEST

static dck_canary_report check(dck_canary_opts *o) {
    dck_canary_report r;
    ck_assert_msg(dck_canary_check(o, dck_comm_self(), &r) == DCK_OK, "%s", dck_last_error());
    ck_assert_int_eq(r.nranks, 1);
    return r;
}

START_TEST(faults_are_named) {
    static const struct {
        const char *spec, *tensor;
        uint32_t bits;
    } cases[] = {
        {"0:3:model.blocks.0.attn.qkv.weight:17:5", "model.blocks.0.attn.qkv.weight", 1u << 5},
        {"0:8:grad.lm_head.weight:100:30", "grad.lm_head.weight", 1u << 30},
        {"0:5:optimizer.exp_avg.wpe.weight:9:0", "optimizer.exp_avg.wpe.weight", 1u},
        {"0:1:optimizer.exp_avg_sq.ln_f.bias:0:31", "optimizer.exp_avg_sq.ln_f.bias", 1u << 31},
        {"0:6:activations:1000:22", "grad.blocks.0.attn.qkv.weight", 0}, /* ln_1's output */
    };
    dck_canary_opts o;
    dck_canary_opts_init(&o);
    dck_canary_report r = check(&o);
    ck_assert_int_eq(r.exit_code, 0);
    ck_assert_int_eq(r.identical, 1);
    ck_assert_int_eq(r.ranks[0].result, DCK_CANARY_SAME);
    ck_assert_int_eq(strlen(r.final_root), 32);
    dck_canary_report_release(&r);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ck_assert_int_eq(dck_canary_inject_parse(cases[i].spec, &o.inject), DCK_OK);
        r = check(&o);
        const dck_canary_rank *x = &r.ranks[0];
        ck_assert_msg(r.exit_code == 1 && x->result == DCK_CANARY_DIFFERS, "%s: not caught",
                      cases[i].spec);
        ck_assert_int_eq(x->step, o.inject.step);
        ck_assert_str_eq(x->tensor, cases[i].tensor);
        ck_assert(x->has_detail);
        ck_assert_int_eq(x->detail_step, o.inject.step);
        if (cases[i].bits) {
            ck_assert_uint_eq(x->ndiff, 1);
            ck_assert_uint_eq(x->bits, cases[i].bits);
        } else {
            ck_assert_uint_gt(x->ndiff, 0);
        }
        dck_canary_report_release(&r);
    }
}
END_TEST

START_TEST(golden_round_trip) {
    char *dir = tu_tmpdir();
    char *g = tu_path(dir, "golden.json");
    dck_canary_opts o;
    dck_canary_opts_init(&o);
    o.write_golden = g;
    dck_canary_report r = check(&o);
    ck_assert_int_eq(r.exit_code, 0);
    dck_canary_report_release(&r);
    dck_canary_opts_init(&o);
    o.oracle = DCK_ORACLE_GOLDEN;
    o.golden = g;
    r = check(&o);
    ck_assert_int_eq(r.exit_code, 0);
    dck_canary_report_release(&r);
    /* no rank lends the oracle's tensors when the only one differs: no detail */
    ck_assert_int_eq(dck_canary_inject_parse("0:2:grad.wte.weight:0:3", &o.inject), DCK_OK);
    r = check(&o);
    ck_assert_int_eq(r.exit_code, 1);
    ck_assert_str_eq(r.ranks[0].tensor, "grad.wte.weight");
    ck_assert(!r.ranks[0].has_detail);
    dck_canary_report_release(&r);
    /* another run: refused, naming the file */
    dck_canary_opts_init(&o);
    o.oracle = DCK_ORACLE_GOLDEN;
    o.golden = g;
    o.cfg.seed = 2;
    ck_assert_int_eq(dck_canary_check(&o, dck_comm_self(), &r), DCK_ERR_MISMATCH);
    ck_assert_msg(strstr(dck_last_error(), "golden.json") && strstr(dck_last_error(), "seed"), "%s",
                  dck_last_error());
    /* damaged: one digest */
    FILE *f = fopen(g, "r+");
    ck_assert_ptr_nonnull(f);
    char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    char *d = strstr(buf, "\"digests\":[[\"");
    ck_assert_ptr_nonnull(d);
    d[14] = 'x';
    fseek(f, 0, SEEK_SET);
    ck_assert_uint_eq(fwrite(buf, 1, n, f), n);
    fclose(f);
    dck_canary_opts_init(&o);
    o.oracle = DCK_ORACLE_GOLDEN;
    o.golden = g;
    ck_assert_int_eq(dck_canary_check(&o, dck_comm_self(), &r), DCK_ERR_FORMAT);
    ck_assert_msg(strstr(dck_last_error(), "not a canary golden file"), "%s", dck_last_error());
    free(g);
    tu_tmpdir_free(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("canary");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, inject_grammar);
    tcase_add_test(tc, presets_and_checks);
    tcase_add_test(tc, taps_change_no_bit);
    tcase_add_test(tc, faults_are_named);
    tcase_add_test(tc, golden_round_trip);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

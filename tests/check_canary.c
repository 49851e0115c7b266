/* detcheck canary's library (src/train/canary.c, canary_golden.c, train_inject.c) on one
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
    ck_assert_msg(strstr(dck_last_error(), "golden.json:1: not a canary golden file: a digest"), "%s",
                  dck_last_error());
    free(g);
    tu_tmpdir_free(dir);
}
END_TEST


/* --steps 0 said "identical" (exit 0) and read oroots[-1]; a
 * vote of one rank compared it with itself; a golden with a vote was
 * ignored. The library refuses them too, not only the CLI. */
START_TEST(nothing_compared_is_refused) {
    dck_canary_opts o;
    dck_canary_report r;
    dck_canary_opts_init(&o);
    o.cfg.steps = 0;
    ck_assert_int_eq(dck_canary_check(&o, dck_comm_self(), &r), DCK_ERR_INVALID);
    ck_assert_msg(strstr(dck_last_error(), "--steps 0"), "%s", dck_last_error());
    ck_assert_int_eq(r.exit_code, 2);
    dck_canary_report_release(&r);
    dck_canary_opts_init(&o);
    o.oracle = DCK_ORACLE_VOTE;
    ck_assert_int_eq(dck_canary_check(&o, dck_comm_self(), &r), DCK_ERR_INVALID);
    ck_assert_msg(strstr(dck_last_error(), "at least 3 ranks"), "%s", dck_last_error());
    dck_canary_report_release(&r);
    o.golden = "missing.json";
    ck_assert_int_eq(dck_canary_check(&o, dck_comm_self(), &r), DCK_ERR_INVALID);
    ck_assert_msg(strstr(dck_last_error(), "two oracles"), "%s", dck_last_error());
    dck_canary_report_release(&r);
    dck_canary_opts_init(&o);
    o.stall_rank = 1;
    ck_assert_int_eq(dck_canary_check(&o, dck_comm_self(), &r), DCK_ERR_INVALID);
    ck_assert_msg(strstr(dck_last_error(), "the job has 1 rank"), "%s", dck_last_error());
    dck_canary_report_release(&r);
}
END_TEST

/* The golden file's two halves alone: what dck_canary_golden_write writes,
 * dck_canary_golden_read gives back, digest for digest; a file written for
 * another model is refused, naming the tensor. */
START_TEST(golden_write_read) {
    char *dir = tu_tmpdir();
    char *g = tu_path(dir, "golden.json");
    dck_canary_opts o;
    dck_canary_opts_init(&o);
    dck_model m;
    ck_assert_int_eq(dck_model_init(&m, &o.cfg), DCK_OK);
    long steps = o.cfg.steps;
    size_t nd = (size_t)steps * DCK_TAP_RECORDED * m.nparams;
    dck_digest *roots = calloc((size_t)steps, sizeof *roots), *dg = calloc(nd, sizeof *dg);
    for (long s = 0; s < steps; s++) roots[s] = (dck_digest){(uint64_t)s, ~(uint64_t)s};
    for (size_t i = 0; i < nd; i++) dg[i] = (dck_digest){i * 0x9E3779B97F4A7C15ull, i};
    ck_assert_msg(dck_canary_golden_write(g, &o.cfg, &m, roots, dg) == DCK_OK, "%s", dck_last_error());
    dck_canary_golden back;
    ck_assert_msg(dck_canary_golden_read(g, &o.cfg, &m, &back) == DCK_OK, "%s", dck_last_error());
    ck_assert_int_eq(back.steps, steps);
    ck_assert_uint_eq(back.ntensors, m.nparams);
    ck_assert(!memcmp(back.roots, roots, (size_t)steps * sizeof *roots));
    ck_assert(!memcmp(back.digests, dg, nd * sizeof *dg));
    dck_canary_golden_release(&back);
    /* another model (wider): its config differs, named */
    dck_canary_opts wide;
    dck_canary_opts_init(&wide);
    wide.cfg.width = 2 * o.cfg.width;
    dck_model mw;
    ck_assert_int_eq(dck_model_init(&mw, &wide.cfg), DCK_OK);
    ck_assert_int_eq(dck_canary_golden_read(g, &wide.cfg, &mw, &back), DCK_ERR_MISMATCH);
    ck_assert_msg(strstr(dck_last_error(), "golden.json: written for another run configuration (width"),
                  "%s", dck_last_error());
    ck_assert_ptr_null(back.roots);
    dck_model_release(&mw);
    dck_model_release(&m);
    free(roots);
    free(dg);
    free(g);
    tu_tmpdir_free(dir);
}
END_TEST

static dck_status parse_text(const char *text, dck_canary_golden *g) {
    return dck_canary_golden_parse(text, strlen(text), "g.json", g);
}

#define HEX "0123456789abcdef0123456789abcdef"
#define ROW "[\"" HEX "\",\"" HEX "\",\"" HEX "\",\"" HEX "\"]"

/* The bounded parser: the layout, white space and field order, and a
 * message naming the line and the reason for every damage. */
START_TEST(golden_parser) {
    dck_canary_golden g;
    const char *good = "{\"detcheck_canary\":1,\"config\":\"{\\\"seed\\\":1}\",\"steps\":2,"
                       "\"tensors\":[\"model.a\"],\"roots\":[\"" HEX "\",\"" HEX "\"],"
                       "\"digests\":[" ROW "," ROW "]}\n";
    ck_assert_msg(parse_text(good, &g) == DCK_OK, "%s", dck_last_error());
    ck_assert_int_eq(g.steps, 2);
    ck_assert_uint_eq(g.ntensors, 1);
    ck_assert_str_eq(g.names, "model.a");
    ck_assert_str_eq(g.config, "{\"seed\":1}");
    dck_canary_golden_release(&g);
    /* any order, any white space */
    const char *spaced = "\n {\n \"digests\" : [ " ROW " ,\n" ROW "] , \"roots\":[\"" HEX "\",\n\"" HEX
                         "\"],\"tensors\":[\"model.\\u00e9\"],\"steps\":2,\"config\":\"{}\",\r\n"
                         "\"detcheck_canary\":1}  ";
    ck_assert_msg(parse_text(spaced, &g) == DCK_OK, "%s", dck_last_error());
    ck_assert_str_eq(g.names, "model.\xc3\xa9");
    dck_canary_golden_release(&g);
    static const struct {
        const char *text, *want;
        dck_status s;
    } bad[] = {
        {"", "g.json:1: not JSON: empty file", DCK_ERR_FORMAT},
        {"\n\n", "g.json:3: not JSON: only white space", DCK_ERR_FORMAT},
        {"[1]", "g.json:1: not JSON: expected '{'", DCK_ERR_FORMAT},
        {"{\"detcheck_canary\":1.0}", "g.json:1: not a canary golden file: the version (detcheck_canary) "
                                      "must be the integer 1, not 1.0", DCK_ERR_FORMAT},
        {"{\"detcheck_canary\":\"1\"}", "must be the integer 1", DCK_ERR_FORMAT},
        {"{\"detcheck_canary\":2}", "g.json:1: canary golden version 2 (this detcheck reads 1)",
         DCK_ERR_UNSUPPORTED},
        {"{\"detcheck_canary\":1,\n\"steps\":0}", "g.json:2: not a canary golden file: steps 0 out of range",
         DCK_ERR_FORMAT},
        {"{\"detcheck_canary\":1,\"steps\":99999999999999999999}", "steps 99999999999999999999 out of range",
         DCK_ERR_FORMAT},
        {"{\"detcheck_canary\":1,\"steps\":1}", "no field \"config\"", DCK_ERR_FORMAT},
        {"{\"detcheck_canary\":1,\"extra\":1}", "unknown field \"extra\"", DCK_ERR_FORMAT},
        {"{\"steps\":1,\"steps\":1}", "field \"steps\" twice", DCK_ERR_FORMAT},
        {"{\"roots\":[\"abc\"]}", "a root \"abc\" is not 32 lowercase hex digits", DCK_ERR_FORMAT},
        {"{\"roots\":[\"" HEX HEX "\"]}", "a root is not 32 hex digits", DCK_ERR_FORMAT},
        {"{\"roots\":[\"" HEX "\"", "g.json:1: not JSON: expected ',' or ']'", DCK_ERR_FORMAT},
        {"{\"tensors\":[\"a\\u0000\"]}", "a tensor name holds a NUL character", DCK_ERR_FORMAT},
        {"{\"tensors\":[\"\\ud800\"]}", "lone high surrogate", DCK_ERR_FORMAT},
        {"{\"tensors\":[\"\xff\"]}", "a tensor name is not valid UTF-8", DCK_ERR_FORMAT},
        {"{\"tensors\":[\"a\nb\"]}", "control character", DCK_ERR_FORMAT},
        {"{\"digests\":[[\"" HEX "\"],[]]}", "digests of step 2: 0, step 1 has 1", DCK_ERR_FORMAT},
        {"{} x", "more after the object", DCK_ERR_FORMAT},
        {"{\"detcheck_canary\":1,\"config\":\"{}\",\"steps\":2,\"tensors\":[\"model.a\"],\"roots\":[\"" HEX
         "\"],\"digests\":[" ROW "," ROW "]}", "1 roots and 2 steps of digests, for 2 steps", DCK_ERR_FORMAT},
        {"{\"detcheck_canary\":1,\"config\":\"{}\",\"steps\":1,\"tensors\":[\"model.a\",\"model.b\"],"
         "\"roots\":[\"" HEX "\"],\"digests\":[" ROW "]}", "4 digests per step for 2 tensors", DCK_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dck_status s = parse_text(bad[i].text, &g);
        ck_assert_msg(s == bad[i].s && strstr(dck_last_error(), bad[i].want), "case %zu: %d %s", i, (int)s,
                      dck_last_error());
        ck_assert_ptr_null(g.roots);
    }
    /* the size of what is read follows the run */
    ck_assert_uint_eq(dck_canary_golden_limit(8, 29), 1123200);
    ck_assert_uint_gt(dck_canary_golden_limit(DCK_CANARY_MAX_STEPS, 77), 100u << 20);
    ck_assert_uint_lt(dck_canary_golden_limit(DCK_CANARY_MAX_STEPS, 77), 200u << 20);
}
END_TEST

/* --write-golden may replace only a golden file (the sniffed first bytes). */
START_TEST(golden_kind) {
    char *dir = tu_tmpdir();
    char *a = tu_path(dir, "a.json"), *b = tu_path(dir, "b.json");
    FILE *f = fopen(a, "w");
    fputs(" \n{ \"detcheck_canary\" :1}", f);
    fclose(f);
    f = fopen(b, "w");
    fputs("{\"format\":\"detcheck-manifest\"}", f);
    fclose(f);
    ck_assert(dck_canary_is_golden(a));
    ck_assert(!dck_canary_is_golden(b));
    dck_canary_opts o;
    dck_canary_report r;
    dck_canary_opts_init(&o);
    o.write_golden = b;
    ck_assert_int_eq(dck_canary_check(&o, dck_comm_self(), &r), DCK_ERR_INVALID);
    ck_assert_msg(strstr(dck_last_error(), "is not a canary golden file; refusing"), "%s", dck_last_error());
    dck_canary_report_release(&r);
    free(a);
    free(b);
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
    tcase_add_test(tc, golden_write_read);
    tcase_add_test(tc, nothing_compared_is_refused);
    tcase_add_test(tc, golden_parser);
    tcase_add_test(tc, golden_kind);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

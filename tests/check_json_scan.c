/* The JSON scanner of common/json_scan.h on its own: one character of a
 * string (dck_json_char: each fault, where it is, and what it decodes to),
 * strings, numbers, objects and arrays walked by a caller, duplicate keys,
 * the first error and its byte offset. The safetensors reader's use of it
 * is checked against jansson in check_safetensors.c and
 * tests/fuzz/fuzz_safetensors.c; the canary golden parser's in
 * check_canary.c. */
#include "testutil.h"
#include "common/json_scan.h"

/* One character of s (its text up to the NUL): bytes taken, else the fault. */
static size_t one_char(const char *s, char *out, size_t *n, dck_json_char_fault *f, size_t *at) {
    const unsigned char *p = (const unsigned char *)s;
    return dck_json_char(p, p + strlen(s), out, n, f, at);
}

START_TEST(char_decodes) {
    static const struct {
        const char *text, *want;
        size_t took;
    } ok[] = {
        {"a", "a", 1},
        {"\\n", "\n", 2},
        {"\\/", "/", 2},
        {"\\\"", "\"", 2},
        {"\\u00e9", "\xc3\xa9", 6},
        {"\\u20AC", "\xe2\x82\xac", 6},
        {"\\ud83d\\ude00", "\xf0\x9f\x98\x80", 12},
        {"\xc3\xa9x", "\xc3\xa9", 2},
        {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80", 4},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char out[4];
        size_t n = 0, at = 99;
        dck_json_char_fault f = 0;
        size_t took = one_char(ok[i].text, out, &n, &f, &at);
        ck_assert_msg(took == ok[i].took, "case %zu: took %zu", i, took);
        ck_assert_uint_eq(n, strlen(ok[i].want));
        ck_assert(!memcmp(out, ok[i].want, n));
        ck_assert_uint_eq(at, 0);
    }
    /* \u0000 is a character: the caller decides */
    char out[4];
    size_t n, at;
    dck_json_char_fault f;
    ck_assert_uint_eq(one_char("\\u0000", out, &n, &f, &at), 6);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(out[0], 0);
}
END_TEST

START_TEST(char_faults) {
    static const struct {
        const char *text;
        dck_json_char_fault fault;
        size_t at;
    } bad[] = {
        {"\\", DCK_JSON_CHAR_END, 0},
        {"\x01", DCK_JSON_CHAR_CONTROL, 0},
        {"\n", DCK_JSON_CHAR_CONTROL, 0},
        {"\xff", DCK_JSON_CHAR_UTF8, 0},
        {"\xe2\x82", DCK_JSON_CHAR_UTF8, 0},
        {"\xc0\xaf", DCK_JSON_CHAR_UTF8, 0},     /* overlong */
        {"\xed\xa0\x80", DCK_JSON_CHAR_UTF8, 0}, /* a surrogate in UTF-8 */
        {"\\x", DCK_JSON_CHAR_ESCAPE, 0},
        {"\\u12", DCK_JSON_CHAR_U_ESCAPE, 0},
        {"\\uzzzz", DCK_JSON_CHAR_U_ESCAPE, 0},
        {"\\udc00", DCK_JSON_CHAR_LONE_LOW, 6},
        {"\\ud800", DCK_JSON_CHAR_LONE_HIGH, 6},
        {"\\ud800x", DCK_JSON_CHAR_LONE_HIGH, 6},
        {"\\ud800\\u0041", DCK_JSON_CHAR_BAD_PAIR, 6},
        {"\\ud800\\u12", DCK_JSON_CHAR_BAD_PAIR, 6},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char out[4];
        size_t n, at = 99;
        dck_json_char_fault f = 0;
        ck_assert_msg(one_char(bad[i].text, out, &n, &f, &at) == 0, "case %zu accepted", i);
        ck_assert_msg(f == bad[i].fault && at == bad[i].at, "case %zu: fault %d at %zu", i, (int)f, at);
    }
}
END_TEST

/* {"a": "x\u00e9", "n": [1, -2, 3.5], "o": {"k": true}} walked by a caller. */
START_TEST(walk_document) {
    const char *text = " {\"a\": \"x\\u00e9\", \"n\": [1, -2, 3.5], \"o\": {\"k\": true}} ";
    dck_json js;
    ck_assert_int_eq(dck_json_init(&js, text, strlen(text), false), DCK_OK);
    dck_json_ws(&js);
    ck_assert(dck_json_at(&js, '{'));
    dck_json_obj o;
    dck_json_obj_open(&js, &o, false);
    const char *k, *v;
    size_t kl, vl;
    ck_assert_int_eq(dck_json_obj_next(&js, &o, &k, &kl), 1);
    ck_assert_str_eq(k, "a");
    ck_assert_int_eq(dck_json_string(&js, false, &v, &vl), 0);
    ck_assert_str_eq(v, "x\xc3\xa9");
    ck_assert_uint_eq(vl, 3);
    ck_assert_int_eq(dck_json_obj_next(&js, &o, &k, &kl), 1);
    ck_assert_str_eq(k, "n");
    uint64_t u[4];
    bool good[4];
    size_t count;
    ck_assert_int_eq(dck_json_u64_array(&js, 2, u, good, 4, &count), 0);
    ck_assert_uint_eq(count, 3);
    ck_assert(good[0] && u[0] == 1 && !good[1] && !good[2]);
    ck_assert_int_eq(dck_json_obj_next(&js, &o, &k, &kl), 1);
    ck_assert_str_eq(k, "o");
    ck_assert_int_eq(dck_json_skip(&js, 2), 0);
    ck_assert_int_eq(dck_json_obj_next(&js, &o, &k, &kl), 0);
    ck_assert_int_eq(dck_json_finish(&js), 0);
    dck_json_free(&js);
}
END_TEST

/* The first error and where it is; the caller's message from it. */
START_TEST(errors_and_offsets) {
    static const struct {
        const char *text, *err;
        size_t at;
    } bad[] = {
        {"{\"a\": 1, \"a\": 2}", "duplicate object key", 9},
        {"{\"a\" 1}", "':' expected", 5},
        {"[1, 2", "']' expected", 5},
        {"[01]", "invalid number", 2},
        {"[1e999]", "real number overflow", 1},
        {"[9223372036854775808]", "too big integer", 1},
        {"[\"x\\ud800\"]", "invalid Unicode surrogate", 9},
        {"[\"\\u0000\"]", "\\u0000 in a string", 8},
        {"[tru]", "invalid token", 1},
        {"[] x", "end of file expected", 3},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dck_json js;
        ck_assert_int_eq(dck_json_init(&js, bad[i].text, strlen(bad[i].text), false), DCK_OK);
        dck_json_ws(&js);
        int r = dck_json_skip(&js, 1);
        if (!r) r = dck_json_finish(&js);
        ck_assert_msg(r == -1 && js.err && !strcmp(js.err, bad[i].err) && js.err_at == bad[i].at,
                      "case %zu: %d %s at %zu", i, r, js.err ? js.err : "(none)", js.err_at);
        ck_assert_int_eq(dck_json_error(&js, "x.json", "header"), DCK_ERR_FORMAT);
        char want[128];
        snprintf(want, sizeof want, "x.json: invalid JSON header at byte %zu: %s", bad[i].at, bad[i].err);
        ck_assert_str_eq(dck_last_error(), want);
        dck_json_free(&js);
    }
    /* allow_nul: \u0000 in values, never in keys */
    const char *nul = "{\"k\": \"a\\u0000b\"}";
    dck_json js;
    ck_assert_int_eq(dck_json_init(&js, nul, strlen(nul), true), DCK_OK);
    ck_assert_int_eq(dck_json_skip(&js, 1), 0);
    dck_json_free(&js);
    const char *nulkey = "{\"a\\u0000\": 1}";
    ck_assert_int_eq(dck_json_init(&js, nulkey, strlen(nulkey), true), DCK_OK);
    ck_assert_int_eq(dck_json_skip(&js, 1), -1);
    ck_assert_str_eq(js.err, "NUL byte in object key");
    dck_json_free(&js);
}
END_TEST

/* {"k0": 0, ..., "k99": 99}; with dup, the last key is k3 again. */
static size_t keys_text(char *text, size_t cap, bool dup) {
    size_t len = (size_t)snprintf(text, cap, "{");
    for (int i = 0; i < 100; i++)
        len += (size_t)snprintf(text + len, cap - len, "%s\"k%d\": %d", i ? ", " : "", dup && i == 99 ? 3 : i, i);
    return len + (size_t)snprintf(text + len, cap - len, "}");
}

/* A deferred object's keys checked once afterwards, and found again. */
START_TEST(deferred_keys) {
    for (int dup = 0; dup < 2; dup++) {
        char text[4096];
        size_t len = keys_text(text, sizeof text, dup);
        dck_json js;
        ck_assert_int_eq(dck_json_init(&js, text, len, false), DCK_OK);
        dck_json_obj o;
        dck_json_obj_open(&js, &o, true);
        const char *keys[128];
        uint32_t at[128];
        size_t n = 0, kl;
        int r;
        for (;;) {
            at[n] = (uint32_t)(js.p - js.start); /* before the comma, as the readers keep it */
            if ((r = dck_json_obj_next(&js, &o, &keys[n], &kl)) != 1) break;
            n++;
            ck_assert_int_eq(dck_json_skip(&js, 2), 0);
        }
        ck_assert_int_eq(r, 0);
        ck_assert_uint_eq(n, 100);
        r = dck_json_dedupe(&js, o.id, keys, sizeof keys[0], at, sizeof at[0], n);
        if (dup) {
            ck_assert_int_eq(r, -1);
            ck_assert_str_eq(js.err, "duplicate object key");
            ck_assert_uint_eq(js.err_at, at[99]);
            ck_assert(!memcmp(text + js.err_at, ", \"k3\"", 6));
        } else {
            ck_assert_int_eq(r, 0);
            ck_assert_int_eq(dck_json_slot_find(&js, o.id, "k42", 3), 42);
            ck_assert_int_eq(dck_json_slot_find(&js, o.id, "k100", 4), -1);
        }
        dck_json_free(&js);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("json_scan");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, char_decodes);
    tcase_add_test(tc, char_faults);
    tcase_add_test(tc, walk_document);
    tcase_add_test(tc, errors_and_offsets);
    tcase_add_test(tc, deferred_keys);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

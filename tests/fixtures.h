/* Helpers shared by the reader suites: fixture paths and comparisons of
 * manifests with the safetensors twin and the values Python printed. */
#ifndef DCK_FIXTURES_H
#define DCK_FIXTURES_H
#include "testutil.h"

#include <jansson.h>

static char fx_buf[8][4096];
static int fx_k;
/* tests/fixtures/NAME from the project root */
static const char *fx(const char *name) {
    const char *top = getenv("DCK_TOP");
    char *b = fx_buf[fx_k++ & 7];
    snprintf(b, 4096, "%s/tests/fixtures/%s", top ? top : ".", name);
    return b;
}

/* Same tensor names, dtypes, shapes, digests and groups. */
static inline void same_tensors(const dck_manifest *a, const dck_manifest *b, const char *what) {
    ck_assert_msg(dck_manifest_tensor_count(a) == dck_manifest_tensor_count(b), "%s: %zu vs %zu tensors", what,
                  dck_manifest_tensor_count(a), dck_manifest_tensor_count(b));
    ck_assert_uint_gt(dck_manifest_tensor_count(a), 0);
    for (size_t i = 0; i < dck_manifest_tensor_count(a); i++) {
        const dck_manifest_tensor *x = dck_manifest_tensor_at(a, i);
        const dck_manifest_tensor *y = dck_manifest_find_tensor(b, x->name);
        ck_assert_msg(y != NULL, "%s: tensor %s missing", what, x->name);
        ck_assert_msg(x->dtype == y->dtype && x->ndim == y->ndim, "%s: %s dtype/rank", what, x->name);
        for (int d = 0; d < x->ndim; d++) ck_assert_uint_eq(x->shape[d], y->shape[d]);
        ck_assert_msg(dck_digest_equal(x->digest, y->digest), "%s: %s digest %s vs %s", what, x->name,
                      tu_hex(x->digest), tu_hex(y->digest));
        ck_assert_int_eq(x->group, y->group);
    }
    ck_assert_msg(dck_digest_equal(dck_manifest_root(a), dck_manifest_root(b)), "%s: roots differ", what);
}

/* Values exactly as in NAME.values.json (both ways). */
static inline void same_values(const dck_manifest *m, const char *json_name) {
    json_error_t err;
    json_t *j = json_load_file(fx(json_name), 0, &err);
    ck_assert_msg(j != NULL, "%s: %s", json_name, err.text);
    ck_assert_msg(dck_manifest_value_count(m) == json_object_size(j), "%s: %zu values, expected %zu", json_name,
                  dck_manifest_value_count(m), json_object_size(j));
    for (size_t i = 0; i < dck_manifest_value_count(m); i++) {
        const dck_manifest_value *v = dck_manifest_value_at(m, i);
        json_t *e = json_object_get(j, v->name);
        ck_assert_msg(e != NULL, "%s: unexpected value %s = %s", json_name, v->name, v->value);
        ck_assert_msg(!strcmp(json_string_value(e), v->value), "%s: value %s is %s, expected %s", json_name,
                      v->name, v->value, json_string_value(e));
    }
    json_decref(j);
}

#endif

/* The restricted unpickler: every protocol (0 to 5) gives the same tree;
 * scalar text as Python prints it; nothing is imported or called; every
 * limit holds on hostile input (each case here is also a regression test for
 * inputs the fuzz target found or could find). */
#include "testutil.h"
#include "formats/pickle.h"

typedef struct {
    char names[64][64];
    char texts[64][256];
    int n;
    int tensors;
} collected;

static dck_status on_value(void *ctx, const char *name, const char *text) {
    collected *c = ctx;
    if (c->n < 64) {
        snprintf(c->names[c->n], 64, "%s", name);
        snprintf(c->texts[c->n], 256, "%s", text);
        c->n++;
    }
    return DCK_OK;
}

static dck_status on_tensor(void *ctx, const char *name, const pk_node *t) {
    (void)name;
    (void)t;
    ((collected *)ctx)->tensors++;
    return DCK_OK;
}

static const char *value_of(const collected *c, const char *name) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->names[i], name)) return c->texts[i];
    return NULL;
}

/* Loads and walks; returns the load status or the walk status. */
static dck_status load_walk(const void *data, size_t len, const pk_limits *lim, collected *out) {
    pk_ctx *c;
    ck_assert_int_eq(dck_pk_ctx_create("test.pkl", lim, &dck_pk_torch_handlers, &c), DCK_OK);
    pk_node *root;
    size_t used;
    memset(out, 0, sizeof *out);
    dck_status s = dck_pk_load(c, data, len, 0, &root, &used);
    if (!s) {
        ck_assert_uint_le(used, len);
        pk_walker w = {out, on_tensor, NULL, on_value, NULL, dck_pk_walk_budget(c)};
        s = dck_pk_walk(root, "", &w, "test.pkl");
    }
    dck_pk_ctx_free(c);
    return s;
}

static const struct {
    int proto;
    const char *data;
    size_t len;
} same_object[] = {
    {0, "\x28\x64\x70\x30\x0a\x56\x61\x0a\x70\x31\x0a\x28\x6c\x70\x32\x0a\x49\x31\x0a\x61\x46\x32\x2e\x35\x0a\x61\x56\x78\x5c\x75\x30\x30\x30\x61\x27\x79\x0a\x70\x33\x0a\x61\x56\x5c\x75\x32\x30\x61\x63\x0a\x70\x34\x0a\x61\x4e\x61\x49\x30\x31\x0a\x61\x28\x49\x31\x0a\x74\x70\x35\x0a\x61\x73\x56\x62\x69\x67\x0a\x70\x36\x0a\x4c\x31\x32\x30\x38\x39\x32\x35\x38\x31\x39\x36\x31\x34\x36\x32\x39\x31\x37\x34\x37\x30\x36\x31\x37\x36\x4c\x0a\x73\x56\x6e\x65\x67\x0a\x70\x37\x0a\x4c\x2d\x31\x31\x38\x30\x35\x39\x31\x36\x32\x30\x37\x31\x37\x34\x31\x31\x33\x30\x33\x34\x32\x34\x4c\x0a\x73\x56\x6d\x0a\x70\x38\x0a\x49\x2d\x35\x0a\x73\x56\x69\x34\x0a\x70\x39\x0a\x49\x37\x30\x30\x30\x30\x0a\x73\x56\x69\x32\x0a\x70\x31\x30\x0a\x49\x33\x30\x30\x0a\x73\x49\x31\x30\x0a\x63\x5f\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x70\x31\x31\x0a\x28\x56\x5c\x75\x30\x30\x30\x30\x01\x0a\x70\x31\x32\x0a\x56\x6c\x61\x74\x69\x6e\x31\x0a\x70\x31\x33\x0a\x74\x70\x31\x34\x0a\x52\x70\x31\x35\x0a\x73\x56\x66\x0a\x70\x31\x36\x0a\x28\x6c\x70\x31\x37\x0a\x46\x30\x2e\x31\x0a\x61\x46\x31\x65\x2d\x30\x35\x0a\x61\x46\x31\x65\x2b\x31\x36\x0a\x61\x46\x2d\x30\x2e\x30\x0a\x61\x46\x69\x6e\x66\x0a\x61\x46\x31\x32\x33\x2e\x30\x0a\x61\x46\x31\x2e\x35\x65\x2b\x33\x30\x30\x0a\x61\x46\x35\x65\x2d\x33\x32\x34\x0a\x61\x73\x56\x73\x65\x71\x0a\x70\x31\x38\x0a\x28\x49\x30\x0a\x49\x31\x0a\x49\x32\x0a\x49\x33\x0a\x49\x34\x0a\x49\x35\x0a\x49\x36\x0a\x49\x37\x0a\x49\x38\x0a\x49\x39\x0a\x49\x31\x30\x0a\x49\x31\x31\x0a\x49\x31\x32\x0a\x49\x31\x33\x0a\x49\x31\x34\x0a\x49\x31\x35\x0a\x49\x31\x36\x0a\x49\x31\x37\x0a\x49\x31\x38\x0a\x49\x31\x39\x0a\x74\x70\x31\x39\x0a\x73\x56\x6e\x65\x73\x74\x65\x64\x0a\x70\x32\x30\x0a\x28\x64\x70\x32\x31\x0a\x56\x78\x0a\x70\x32\x32\x0a\x28\x64\x70\x32\x33\x0a\x56\x79\x0a\x70\x32\x34\x0a\x28\x6c\x70\x32\x35\x0a\x49\x30\x30\x0a\x61\x49\x32\x0a\x61\x73\x73\x73\x2e", 463},
    {1, "\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28\x4b\x01\x47\x40\x04\x00\x00\x00\x00\x00\x00\x58\x04\x00\x00\x00\x78\x0a\x27\x79\x71\x03\x58\x03\x00\x00\x00\xe2\x82\xac\x71\x04\x4e\x49\x30\x31\x0a\x28\x4b\x01\x74\x71\x05\x65\x58\x03\x00\x00\x00\x62\x69\x67\x71\x06\x4c\x31\x32\x30\x38\x39\x32\x35\x38\x31\x39\x36\x31\x34\x36\x32\x39\x31\x37\x34\x37\x30\x36\x31\x37\x36\x4c\x0a\x58\x03\x00\x00\x00\x6e\x65\x67\x71\x07\x4c\x2d\x31\x31\x38\x30\x35\x39\x31\x36\x32\x30\x37\x31\x37\x34\x31\x31\x33\x30\x33\x34\x32\x34\x4c\x0a\x58\x01\x00\x00\x00\x6d\x71\x08\x4a\xfb\xff\xff\xff\x58\x02\x00\x00\x00\x69\x34\x71\x09\x4a\x70\x11\x01\x00\x58\x02\x00\x00\x00\x69\x32\x71\x0a\x4d\x2c\x01\x4b\x0a\x63\x5f\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x0b\x28\x58\x02\x00\x00\x00\x00\x01\x71\x0c\x58\x06\x00\x00\x00\x6c\x61\x74\x69\x6e\x31\x71\x0d\x74\x71\x0e\x52\x71\x0f\x58\x01\x00\x00\x00\x66\x71\x10\x5d\x71\x11\x28\x47\x3f\xb9\x99\x99\x99\x99\x99\x9a\x47\x3e\xe4\xf8\xb5\x88\xe3\x68\xf1\x47\x43\x41\xc3\x79\x37\xe0\x80\x00\x47\x80\x00\x00\x00\x00\x00\x00\x00\x47\x7f\xf0\x00\x00\x00\x00\x00\x00\x47\x40\x5e\xc0\x00\x00\x00\x00\x00\x47\x7e\x41\xeb\x2d\x66\x00\x58\x35\x47\x00\x00\x00\x00\x00\x00\x00\x01\x65\x58\x03\x00\x00\x00\x73\x65\x71\x71\x12\x28\x4b\x00\x4b\x01\x4b\x02\x4b\x03\x4b\x04\x4b\x05\x4b\x06\x4b\x07\x4b\x08\x4b\x09\x4b\x0a\x4b\x0b\x4b\x0c\x4b\x0d\x4b\x0e\x4b\x0f\x4b\x10\x4b\x11\x4b\x12\x4b\x13\x74\x71\x13\x58\x06\x00\x00\x00\x6e\x65\x73\x74\x65\x64\x71\x14\x7d\x71\x15\x58\x01\x00\x00\x00\x78\x71\x16\x7d\x71\x17\x58\x01\x00\x00\x00\x79\x71\x18\x5d\x71\x19\x28\x49\x30\x30\x0a\x4b\x02\x65\x73\x73\x75\x2e", 411},
    {2, "\x80\x02\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28\x4b\x01\x47\x40\x04\x00\x00\x00\x00\x00\x00\x58\x04\x00\x00\x00\x78\x0a\x27\x79\x71\x03\x58\x03\x00\x00\x00\xe2\x82\xac\x71\x04\x4e\x88\x4b\x01\x85\x71\x05\x65\x58\x03\x00\x00\x00\x62\x69\x67\x71\x06\x8a\x0b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x58\x03\x00\x00\x00\x6e\x65\x67\x71\x07\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0\x58\x01\x00\x00\x00\x6d\x71\x08\x4a\xfb\xff\xff\xff\x58\x02\x00\x00\x00\x69\x34\x71\x09\x4a\x70\x11\x01\x00\x58\x02\x00\x00\x00\x69\x32\x71\x0a\x4d\x2c\x01\x4b\x0a\x63\x5f\x63\x6f\x64\x65\x63\x73\x0a\x65\x6e\x63\x6f\x64\x65\x0a\x71\x0b\x58\x02\x00\x00\x00\x00\x01\x71\x0c\x58\x06\x00\x00\x00\x6c\x61\x74\x69\x6e\x31\x71\x0d\x86\x71\x0e\x52\x71\x0f\x58\x01\x00\x00\x00\x66\x71\x10\x5d\x71\x11\x28\x47\x3f\xb9\x99\x99\x99\x99\x99\x9a\x47\x3e\xe4\xf8\xb5\x88\xe3\x68\xf1\x47\x43\x41\xc3\x79\x37\xe0\x80\x00\x47\x80\x00\x00\x00\x00\x00\x00\x00\x47\x7f\xf0\x00\x00\x00\x00\x00\x00\x47\x40\x5e\xc0\x00\x00\x00\x00\x00\x47\x7e\x41\xeb\x2d\x66\x00\x58\x35\x47\x00\x00\x00\x00\x00\x00\x00\x01\x65\x58\x03\x00\x00\x00\x73\x65\x71\x71\x12\x28\x4b\x00\x4b\x01\x4b\x02\x4b\x03\x4b\x04\x4b\x05\x4b\x06\x4b\x07\x4b\x08\x4b\x09\x4b\x0a\x4b\x0b\x4b\x0c\x4b\x0d\x4b\x0e\x4b\x0f\x4b\x10\x4b\x11\x4b\x12\x4b\x13\x74\x71\x13\x58\x06\x00\x00\x00\x6e\x65\x73\x74\x65\x64\x71\x14\x7d\x71\x15\x58\x01\x00\x00\x00\x78\x71\x16\x7d\x71\x17\x58\x01\x00\x00\x00\x79\x71\x18\x5d\x71\x19\x28\x89\x4b\x02\x65\x73\x73\x75\x2e", 375},
    {3, "\x80\x03\x7d\x71\x00\x28\x58\x01\x00\x00\x00\x61\x71\x01\x5d\x71\x02\x28\x4b\x01\x47\x40\x04\x00\x00\x00\x00\x00\x00\x58\x04\x00\x00\x00\x78\x0a\x27\x79\x71\x03\x58\x03\x00\x00\x00\xe2\x82\xac\x71\x04\x4e\x88\x4b\x01\x85\x71\x05\x65\x58\x03\x00\x00\x00\x62\x69\x67\x71\x06\x8a\x0b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x58\x03\x00\x00\x00\x6e\x65\x67\x71\x07\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0\x58\x01\x00\x00\x00\x6d\x71\x08\x4a\xfb\xff\xff\xff\x58\x02\x00\x00\x00\x69\x34\x71\x09\x4a\x70\x11\x01\x00\x58\x02\x00\x00\x00\x69\x32\x71\x0a\x4d\x2c\x01\x4b\x0a\x43\x02\x00\x01\x71\x0b\x58\x01\x00\x00\x00\x66\x71\x0c\x5d\x71\x0d\x28\x47\x3f\xb9\x99\x99\x99\x99\x99\x9a\x47\x3e\xe4\xf8\xb5\x88\xe3\x68\xf1\x47\x43\x41\xc3\x79\x37\xe0\x80\x00\x47\x80\x00\x00\x00\x00\x00\x00\x00\x47\x7f\xf0\x00\x00\x00\x00\x00\x00\x47\x40\x5e\xc0\x00\x00\x00\x00\x00\x47\x7e\x41\xeb\x2d\x66\x00\x58\x35\x47\x00\x00\x00\x00\x00\x00\x00\x01\x65\x58\x03\x00\x00\x00\x73\x65\x71\x71\x0e\x28\x4b\x00\x4b\x01\x4b\x02\x4b\x03\x4b\x04\x4b\x05\x4b\x06\x4b\x07\x4b\x08\x4b\x09\x4b\x0a\x4b\x0b\x4b\x0c\x4b\x0d\x4b\x0e\x4b\x0f\x4b\x10\x4b\x11\x4b\x12\x4b\x13\x74\x71\x0f\x58\x06\x00\x00\x00\x6e\x65\x73\x74\x65\x64\x71\x10\x7d\x71\x11\x58\x01\x00\x00\x00\x78\x71\x12\x7d\x71\x13\x58\x01\x00\x00\x00\x79\x71\x14\x5d\x71\x15\x28\x89\x4b\x02\x65\x73\x73\x75\x2e", 335},
    {4, "\x80\x04\x95\x10\x01\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x5d\x94\x28\x4b\x01\x47\x40\x04\x00\x00\x00\x00\x00\x00\x8c\x04\x78\x0a\x27\x79\x94\x8c\x03\xe2\x82\xac\x94\x4e\x88\x4b\x01\x85\x94\x65\x8c\x03\x62\x69\x67\x94\x8a\x0b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x8c\x03\x6e\x65\x67\x94\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0\x8c\x01\x6d\x94\x4a\xfb\xff\xff\xff\x8c\x02\x69\x34\x94\x4a\x70\x11\x01\x00\x8c\x02\x69\x32\x94\x4d\x2c\x01\x4b\x0a\x43\x02\x00\x01\x94\x8c\x01\x66\x94\x5d\x94\x28\x47\x3f\xb9\x99\x99\x99\x99\x99\x9a\x47\x3e\xe4\xf8\xb5\x88\xe3\x68\xf1\x47\x43\x41\xc3\x79\x37\xe0\x80\x00\x47\x80\x00\x00\x00\x00\x00\x00\x00\x47\x7f\xf0\x00\x00\x00\x00\x00\x00\x47\x40\x5e\xc0\x00\x00\x00\x00\x00\x47\x7e\x41\xeb\x2d\x66\x00\x58\x35\x47\x00\x00\x00\x00\x00\x00\x00\x01\x65\x8c\x03\x73\x65\x71\x94\x28\x4b\x00\x4b\x01\x4b\x02\x4b\x03\x4b\x04\x4b\x05\x4b\x06\x4b\x07\x4b\x08\x4b\x09\x4b\x0a\x4b\x0b\x4b\x0c\x4b\x0d\x4b\x0e\x4b\x0f\x4b\x10\x4b\x11\x4b\x12\x4b\x13\x74\x94\x8c\x06\x6e\x65\x73\x74\x65\x64\x94\x7d\x94\x8c\x01\x78\x94\x7d\x94\x8c\x01\x79\x94\x5d\x94\x28\x89\x4b\x02\x65\x73\x73\x75\x2e", 283},
    {5, "\x80\x05\x95\x10\x01\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x5d\x94\x28\x4b\x01\x47\x40\x04\x00\x00\x00\x00\x00\x00\x8c\x04\x78\x0a\x27\x79\x94\x8c\x03\xe2\x82\xac\x94\x4e\x88\x4b\x01\x85\x94\x65\x8c\x03\x62\x69\x67\x94\x8a\x0b\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x8c\x03\x6e\x65\x67\x94\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\xc0\x8c\x01\x6d\x94\x4a\xfb\xff\xff\xff\x8c\x02\x69\x34\x94\x4a\x70\x11\x01\x00\x8c\x02\x69\x32\x94\x4d\x2c\x01\x4b\x0a\x43\x02\x00\x01\x94\x8c\x01\x66\x94\x5d\x94\x28\x47\x3f\xb9\x99\x99\x99\x99\x99\x9a\x47\x3e\xe4\xf8\xb5\x88\xe3\x68\xf1\x47\x43\x41\xc3\x79\x37\xe0\x80\x00\x47\x80\x00\x00\x00\x00\x00\x00\x00\x47\x7f\xf0\x00\x00\x00\x00\x00\x00\x47\x40\x5e\xc0\x00\x00\x00\x00\x00\x47\x7e\x41\xeb\x2d\x66\x00\x58\x35\x47\x00\x00\x00\x00\x00\x00\x00\x01\x65\x8c\x03\x73\x65\x71\x94\x28\x4b\x00\x4b\x01\x4b\x02\x4b\x03\x4b\x04\x4b\x05\x4b\x06\x4b\x07\x4b\x08\x4b\x09\x4b\x0a\x4b\x0b\x4b\x0c\x4b\x0d\x4b\x0e\x4b\x0f\x4b\x10\x4b\x11\x4b\x12\x4b\x13\x74\x94\x8c\x06\x6e\x65\x73\x74\x65\x64\x94\x7d\x94\x8c\x01\x78\x94\x7d\x94\x8c\x01\x79\x94\x5d\x94\x28\x89\x4b\x02\x65\x73\x73\x75\x2e", 283},
};

static const struct {
    const char *name, *text;
} expected_values[] = {
    {"a.0", "1"},
    {"10", "bytes:6a4a5274c1b0d3add6645fc3051a9457"},
    {"a.1", "2.5"},
    {"a.4", "None"},
    {"a.5", "True"},
    {"a.6.0", "1"},
    {"big", "1208925819614629174706176"},
    {"f.0", "0.1"},
    {"f.1", "1e-05"},
    {"f.2", "1e+16"},
    {"f.3", "-0.0"},
    {"f.4", "inf"},
    {"f.5", "123.0"},
    {"f.6", "1.5e+300"},
    {"f.7", "5e-324"},
    {"i2", "300"},
    {"i4", "70000"},
    {"m", "-5"},
    {"neg", "-1180591620717411303424"},
    {"nested.x.y.0", "False"},
    {"nested.x.y.1", "2"},
    {"seq", "(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)"},
};

START_TEST(protocols_0_to_5_same_values) {
    for (size_t p = 0; p < sizeof same_object / sizeof same_object[0]; p++) {
        collected c;
        dck_status s = load_walk(same_object[p].data, same_object[p].len, NULL, &c);
        ck_assert_msg(s == DCK_OK, "protocol %d: %s", same_object[p].proto, dck_last_error());
        size_t n = sizeof expected_values / sizeof expected_values[0];
        ck_assert_msg((size_t)c.n == n, "protocol %d: %d values, expected %zu", same_object[p].proto, c.n, n);
        for (size_t i = 0; i < n; i++) {
            const char *v = value_of(&c, expected_values[i].name);
            ck_assert_msg(v != NULL, "protocol %d: no value %s", same_object[p].proto, expected_values[i].name);
            ck_assert_msg(!strcmp(v, expected_values[i].text), "protocol %d: %s is %s, expected %s",
                          same_object[p].proto, expected_values[i].name, v, expected_values[i].text);
        }
    }
}
END_TEST

/* A REDUCE of os.system is an opaque object: nothing runs, and strings are
 * never values. */
START_TEST(never_calls) {
    static const char p[] = "cos\nsystem\n(S'touch /tmp/detcheck-pwned'\ntR.";
    pk_ctx *c;
    ck_assert_int_eq(dck_pk_ctx_create("evil", NULL, &dck_pk_torch_handlers, &c), DCK_OK);
    pk_node *root;
    size_t used;
    ck_assert_int_eq(dck_pk_load(c, (const uint8_t *)p, sizeof p - 1, 0, &root, &used), DCK_OK);
    ck_assert_int_eq(root->kind, PK_OBJECT);
    ck_assert(dck_pk_object_is(root, "os", "system"));
    dck_pk_ctx_free(c);
    ck_assert_int_ne(access("/tmp/detcheck-pwned", F_OK), 0);
    collected col;
    ck_assert_int_eq(load_walk(p, sizeof p - 1, NULL, &col), DCK_OK);
    ck_assert_int_eq(col.n, 0);
}
END_TEST

/* argparse.Namespace via NEWOBJ + BUILD: its attributes are walked. */
START_TEST(opaque_object_state) {
    static const char p[] = "\x80\x02}q\x00X\x04\x00\x00\x00" "argsq\x01" "cargparse\nNamespace\nq\x02)\x81q\x03}q\x04(X\x02\x00\x00\x00lrq\x05G?PbM\xd2\xf1\xa9\xfcX\x04\x00\x00\x00seedq\x06K\x07ubs.";
    collected c;
    ck_assert_int_eq(load_walk(p, sizeof p - 1, NULL, &c), DCK_OK);
    ck_assert_str_eq(value_of(&c, "args.lr"), "0.001");
    ck_assert_str_eq(value_of(&c, "args.seed"), "7");
}
END_TEST

/* A tensor through BINPERSID + _rebuild_tensor_v2, and the tensor limit. */
START_TEST(tensor_and_tensor_limit) {
    static const char p[] =
        "\x80\x02}q\x00X\x01\x00\x00\x00wq\x01" "ctorch._utils\n_rebuild_tensor_v2\nq\x02((X\x07\x00\x00\x00storage"
        "ctorch\nFloatStorage\nX\x01\x00\x00\x00" "0X\x03\x00\x00\x00" "cpuK\x06tQK\x00K\x02K\x03\x86K\x03K\x01\x86"
        "\x89" "ccollections\nOrderedDict\n)Rtq\x03Rq\x04s.";
    collected c;
    ck_assert_int_eq(load_walk(p, sizeof p - 1, NULL, &c), DCK_OK);
    ck_assert_int_eq(c.tensors, 1);
    pk_ctx *ctx;
    pk_limits lim;
    dck_pk_limits_default(&lim);
    lim.max_tensors = 0;
    ck_assert_int_eq(dck_pk_ctx_create("t", &lim, &dck_pk_torch_handlers, &ctx), DCK_OK);
    pk_node *root;
    size_t used;
    ck_assert_int_eq(dck_pk_load(ctx, (const uint8_t *)p, sizeof p - 1, 0, &root, &used), DCK_ERR_LIMIT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "t: more tensors than the limit at byte"));
    dck_pk_ctx_free(ctx);
}
END_TEST

static dck_status status_of(const void *p, size_t n, const pk_limits *lim) {
    collected c;
    return load_walk(p, n, lim, &c);
}
#define S(lit) (lit), (sizeof(lit) - 1)

START_TEST(hostile_inputs) {
    ck_assert_int_eq(status_of(S(""), NULL), DCK_ERR_TRUNCATED);
    ck_assert_int_eq(status_of(S("\x80\x02"), NULL), DCK_ERR_TRUNCATED);
    ck_assert_int_eq(status_of(S("\x80\x06N."), NULL), DCK_ERR_UNSUPPORTED);
    ck_assert_int_eq(status_of(S("\xff"), NULL), DCK_ERR_FORMAT);
    ck_assert_int_eq(status_of(S("."), NULL), DCK_ERR_FORMAT);             /* stack underflow */
    ck_assert_int_eq(status_of(S("(((."), NULL), DCK_ERR_FORMAT);          /* STOP at a MARK */
    ck_assert_int_eq(status_of(S("Na."), NULL), DCK_ERR_FORMAT);           /* APPEND to None */
    ck_assert_int_eq(status_of(S("NNs."), NULL), DCK_ERR_FORMAT);          /* SETITEM on nothing */
    ck_assert_int_eq(status_of(S("h\x05."), NULL), DCK_ERR_FORMAT);        /* undefined memo */
    ck_assert_int_eq(status_of(S("Nr\xff\xff\xff\x7f."), NULL), DCK_ERR_LIMIT); /* memo key 2^31-1 */
    ck_assert_int_eq(status_of(S("X\xff\xff\xff\xff."), NULL), DCK_ERR_LIMIT);     /* 4 GiB string */
    ck_assert_int_eq(status_of(S("X\x00\x00\x00\x10."), NULL), DCK_ERR_TRUNCATED); /* 256 MiB, no allocation */
    ck_assert_int_eq(status_of(S("\x8d\xff\xff\xff\xff\xff\xff\xff\xff."), NULL), DCK_ERR_LIMIT);
    ck_assert_int_eq(status_of(S("\x8b\xff\xff\xff\xff."), NULL), DCK_ERR_FORMAT);  /* LONG4 negative */
    ck_assert_int_eq(status_of(S("\x82\x01."), NULL), DCK_ERR_UNSUPPORTED);   /* EXT1 */
    ck_assert_int_eq(status_of(S("\x97."), NULL), DCK_ERR_UNSUPPORTED);       /* NEXT_BUFFER */
    ck_assert_int_eq(status_of(S("S'abc\n."), NULL), DCK_ERR_FORMAT);        /* unquoted STRING */
    ck_assert_int_eq(status_of(S("Iabc\n."), NULL), DCK_ERR_FORMAT);
    ck_assert_int_eq(status_of(S("V\\u12\n."), NULL), DCK_ERR_FORMAT);
    ck_assert_int_eq(status_of(S("\x8c\x01\xff\x8c\x01x\x93."), NULL), DCK_OK); /* odd but harmless global */
    ck_assert_int_eq(status_of(S("]\x93."), NULL), DCK_ERR_FORMAT);          /* STACK_GLOBAL of non-strings */
    ck_assert_int_eq(status_of(S("\x80\x02K\x01K\x02\x81."), NULL), DCK_OK); /* NEWOBJ of an int: opaque */
    /* more MARKs than the limit */
    size_t n = 20000;
    char *marks = malloc(n + 1);
    memset(marks, '(', n);
    marks[n] = '.';
    ck_assert_int_eq(status_of(marks, n + 1, NULL), DCK_ERR_LIMIT);
    free(marks);
}
END_TEST

/* _rebuild_from_type_v2(f, t, L, s) with L = [f, t, L, s]: a loop through
 * the memo that would recurse forever. */
START_TEST(rebuild_from_type_loop) {
    static const char p[] = "ctorch._tensor\n_rebuild_from_type_v2\nq\x00]q\x01(h\x00Nh\x01Ne"
                            "h\x00h\x01R.";
    ck_assert_int_eq(status_of(p, sizeof p - 1, NULL), DCK_ERR_LIMIT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "_rebuild_from_type nested"));
}
END_TEST

/* Lists nested 300 deep: loads, but the walk stops at its depth limit. */
START_TEST(deep_nesting) {
    size_t depth = 300;
    char *p = malloc(2 * depth + 2);
    size_t k = 0;
    for (size_t i = 0; i < depth; i++) p[k++] = ']';
    for (size_t i = 1; i < depth; i++) p[k++] = 'a';
    p[k++] = '.';
    ck_assert_int_eq(status_of(p, k, NULL), DCK_ERR_LIMIT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "nested deeper"));
    free(p);
}
END_TEST

/* A list that contains itself. */
START_TEST(cycle) {
    ck_assert_int_eq(status_of(S("]q\x00h\x00h\x00" "a."), NULL), DCK_ERR_LIMIT);
}
END_TEST

/* "Billion laughs": 64 levels of tuples of the level below, twice: 2^64
 * paths from a few hundred bytes. The walk's visit budget stops it. */
START_TEST(shared_reference_explosion) {
    char p[1024];
    size_t k = 0;
    p[k++] = 'K';
    p[k++] = 1;
    p[k++] = 'q';
    p[k++] = 0;
    for (int i = 0; i < 64; i++) {
        p[k++] = 'h'; p[k++] = 0;
        p[k++] = 'h'; p[k++] = 0;
        p[k++] = (char)0x86; /* TUPLE2 */
        p[k++] = 'q'; p[k++] = 0;
    }
    p[k++] = '.';
    ck_assert_int_eq(status_of(p, k, NULL), DCK_ERR_LIMIT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "reachable"));
}
END_TEST

/* Found by fuzz_pickle (slow unit): DUP and SETITEMS build a DAG whose
 * walk would visit 2^24 objects; the budget scales with the pickle's own
 * object count, so it stops after a few hundred thousand. */
static const uint8_t fuzz_slow_dag[] = {
    0x80, 0x03, 0x7d, 0x71, 0x00, 0x28, 0x58, 0x01, 0x00, 0x00, 0x00, 0x61, 0x71, 0x01, 0x5d, 0x71,
    0x02, 0x28, 0x4b, 0x01, 0x47, 0x40, 0x04, 0x38, 0x00, 0x00, 0x71, 0x00, 0x28, 0x58, 0x01, 0x00,
    0x00, 0x00, 0x61, 0x71, 0x01, 0x5d, 0x71, 0x02, 0x71, 0x00, 0x28, 0x58, 0x01, 0x00, 0x00, 0x00,
    0x61, 0x71, 0x01, 0x5d, 0x71, 0x02, 0x28, 0x4b, 0x01, 0x47, 0x40, 0x04, 0x37, 0x00, 0xbc, 0x71,
    0x02, 0x28, 0x4b, 0x01, 0x47, 0x40, 0x04, 0x38, 0x00, 0x00, 0x71, 0x00, 0x28, 0x58, 0x01, 0x00,
    0x00, 0x00, 0x61, 0x71, 0x01, 0x5d, 0x71, 0x02, 0x71, 0x00, 0x28, 0x58, 0x01, 0x00, 0x00, 0x00,
    0x61, 0x71, 0x01, 0x5d, 0x71, 0x02, 0x28, 0x4b, 0x01, 0x47, 0x40, 0x04, 0x38, 0x00, 0xbc, 0x00,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x81, 0x32,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x58, 0x03, 0x00, 0x00, 0x00,
    0xe2, 0x82, 0xac, 0x71, 0x04, 0x4e, 0x88, 0x4b, 0x01, 0x85, 0x71, 0x05, 0x65, 0x32, 0x32, 0x32,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x81, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x58, 0x03, 0x00, 0x00, 0x00, 0xe2,
    0x82, 0xac, 0x71, 0x04, 0x4e, 0x88, 0x4b, 0x01, 0x85, 0x71, 0x04, 0x4e, 0x88, 0x4b, 0x01, 0x85,
    0x71, 0x05, 0x65, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x81, 0x32,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x58,
    0x03, 0x00, 0x00, 0x00, 0xe2, 0x82, 0xac, 0x71, 0x04, 0x4e, 0x88, 0x4b, 0x00, 0x32, 0x32, 0x32,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x81, 0x32, 0x32, 0x32, 0x32,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x58, 0x03, 0x00, 0x00, 0x00, 0xe2, 0x82, 0xac,
    0x71, 0x04, 0x4e, 0x88, 0x4b, 0x01, 0x85, 0x71, 0x05, 0x65, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x81, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x58, 0x03, 0x00, 0x00, 0x00, 0xe2, 0x82, 0xac, 0x71,
    0x04, 0x4e, 0x88, 0x4b, 0x01, 0x85, 0x71, 0x04, 0x4e, 0x88, 0x4b, 0x01, 0x85, 0x71, 0x05, 0x65,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x81, 0x32, 0x32, 0x32, 0x32,
    0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x32, 0x58, 0x03, 0x00, 0x00,
    0x00, 0xe2, 0x82, 0xac, 0x71, 0x04, 0x4e, 0x88, 0x4b, 0x01, 0x85, 0x71, 0x05, 0x65, 0x71, 0x11,
    0x75, 0x2e
};

START_TEST(regression_fuzz_slow_dag) {
    pk_ctx *c;
    ck_assert_int_eq(dck_pk_ctx_create("slow", NULL, &dck_pk_torch_handlers, &c), DCK_OK);
    pk_node *root;
    size_t used;
    ck_assert_int_eq(dck_pk_load(c, fuzz_slow_dag, sizeof fuzz_slow_dag, 0, &root, &used), DCK_OK);
    uint64_t budget = dck_pk_walk_budget(c);
    ck_assert_uint_lt(budget, 1000000);
    collected col;
    memset(&col, 0, sizeof col);
    pk_walker w = {&col, on_tensor, NULL, on_value, NULL, budget};
    ck_assert_int_eq(dck_pk_walk(root, "", &w, "slow"), DCK_ERR_LIMIT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "objects reachable"));
    dck_pk_ctx_free(c);
}
END_TEST

START_TEST(object_and_memory_limits) {
    /* 20 ints in a list with room for 10 objects */
    char p[128];
    size_t k = 0;
    p[k++] = ']';
    p[k++] = '(';
    for (int i = 0; i < 20; i++) { p[k++] = 'K'; p[k++] = (char)i; }
    p[k++] = 'e';
    p[k++] = '.';
    pk_limits lim;
    dck_pk_limits_default(&lim);
    ck_assert_int_eq(status_of(p, k, &lim), DCK_OK);
    lim.max_nodes = 10;
    ck_assert_int_eq(status_of(p, k, &lim), DCK_ERR_LIMIT);
    dck_pk_limits_default(&lim);
    lim.max_bytes = 1000;
    ck_assert_int_eq(status_of(p, k, &lim), DCK_ERR_LIMIT);
    dck_pk_limits_default(&lim);
    lim.max_stack = 5;
    ck_assert_int_eq(status_of(p, k, &lim), DCK_ERR_LIMIT);
    dck_pk_limits_default(&lim);
    lim.max_str = 2;
    ck_assert_int_eq(status_of(S("X\x03\x00\x00\x00" "abc."), &lim), DCK_ERR_LIMIT);
    ck_assert_int_eq(status_of(S("X\x02\x00\x00\x00" "ab."), &lim), DCK_OK);
}
END_TEST

/* numpy dtype strings and torch dtype names. */
START_TEST(dtype_names) {
    bool bs;
    ck_assert_int_eq(dck_pk_numpy_dtype("<f4", &bs), DCK_F32);
    ck_assert(!bs);
    ck_assert_int_eq(dck_pk_numpy_dtype(">i8", &bs), DCK_I64);
    ck_assert(bs);
    ck_assert_int_eq(dck_pk_numpy_dtype("|u1", &bs), DCK_U8);
    ck_assert(!bs);
    ck_assert_int_eq(dck_pk_numpy_dtype("<c8", &bs), DCK_C64);
    ck_assert_int_eq(dck_pk_numpy_dtype("<c4", &bs), -1);
    ck_assert_int_eq(dck_pk_torch_dtype("bfloat16"), DCK_BF16);
    ck_assert_int_eq(dck_pk_torch_dtype("float8_e5m2"), DCK_F8_E5M2);
    ck_assert_int_eq(dck_pk_torch_dtype("complex64"), DCK_C64);
    ck_assert_int_eq(dck_pk_torch_dtype("complex32"), -1);
    ck_assert_int_eq(dck_pk_storage_dtype("HalfStorage"), DCK_F16);
    ck_assert_int_eq(dck_pk_storage_dtype("UntypedStorage"), -2);
    ck_assert_int_eq(dck_pk_storage_dtype("ComplexFloatStorage"), DCK_C64);
    ck_assert_int_eq(dck_pk_storage_dtype("ComplexHalfStorage"), -1);
}
END_TEST

/* The opcode table: every opcode of protocols 0 to 5 has a row, and every
 * other byte is refused with the same message as before the table. */
START_TEST(opcode_table) {
    static const char known[] = "(.012NIJKLMFGSTUVX)t]lae}dsucRiobpqrghjPQBC"
                                "\x80\x81\x82\x83\x84\x85\x86\x87\x88\x89\x8a\x8b\x8c\x8d\x8e\x8f"
                                "\x90\x91\x92\x93\x94\x95\x96\x97\x98";
    ck_assert_uint_eq(sizeof known - 1, 68);
    for (int b = 0; b < 256; b++) {
        uint8_t one = (uint8_t)b;
        dck_status s = status_of(&one, 1, NULL);
        bool is_known = b && memchr(known, b, sizeof known - 1);
        char want[64];
        snprintf(want, sizeof want, "test.pkl: unknown opcode 0x%02x at byte 0", b);
        if (is_known) {
            ck_assert_msg(s != DCK_OK && !strstr(dck_last_error(), "unknown opcode"), "opcode 0x%02x: %s", b,
                          dck_last_error());
        } else {
            ck_assert_int_eq(s, DCK_ERR_FORMAT);
            ck_assert_str_eq(dck_last_error(), want);
        }
    }
}
END_TEST

/* The VM interprets no global by itself: without a handler table an
 * OrderedDict is an opaque object; with the torch table it is a dict; a name
 * outside the allow-list stays opaque either way. */
START_TEST(allow_list_is_the_table) {
    static const char od[] = "\x80\x02" "ccollections\nOrderedDict\n)R.";
    static const char ev[] = "\x80\x02" "cbuiltins\neval\nX\x01\x00\x00\x00" "1\x85R.";
    static const char newobj_builtin_set[] = "\x80\x02" "c__builtin__\nset\n)\x81.";
    static const char newobj_builtins_set[] = "\x80\x02" "cbuiltins\nset\n)\x81.";
    const pk_handlers *tables[2] = {NULL, &dck_pk_torch_handlers};
    for (int t = 0; t < 2; t++) {
        pk_ctx *c;
        ck_assert_int_eq(dck_pk_ctx_create("t", NULL, tables[t], &c), DCK_OK);
        pk_node *root;
        size_t used;
        ck_assert_int_eq(dck_pk_load(c, (const uint8_t *)od, sizeof od - 1, 0, &root, &used), DCK_OK);
        if (t) ck_assert_int_eq(root->kind, PK_DICT);
        else ck_assert(dck_pk_object_is(root, "collections", "OrderedDict"));
        ck_assert_int_eq(dck_pk_load(c, (const uint8_t *)ev, sizeof ev - 1, 0, &root, &used), DCK_OK);
        ck_assert(dck_pk_object_is(root, "builtins", "eval"));
        /* NEWOBJ: only builtins.set has a row, __builtin__.set (REDUCE only) does not */
        ck_assert_int_eq(dck_pk_load(c, (const uint8_t *)newobj_builtin_set, sizeof newobj_builtin_set - 1, 0,
                                     &root, &used), DCK_OK);
        ck_assert(dck_pk_object_is(root, "__builtin__", "set"));
        ck_assert_int_eq(dck_pk_load(c, (const uint8_t *)newobj_builtins_set, sizeof newobj_builtins_set - 1, 0,
                                     &root, &used), DCK_OK);
        if (t) ck_assert_int_eq(root->kind, PK_SET);
        else ck_assert(dck_pk_object_is(root, "builtins", "set"));
        dck_pk_ctx_free(c);
    }
    /* a refused argument keeps its message */
    static const char enc[] = "c_codecs\nencode\n(Vx\nVutf-16\ntR.";
    ck_assert_int_eq(status_of(S(enc), NULL), DCK_ERR_UNSUPPORTED);
    ck_assert_str_eq(dck_last_error(),
                     "test.pkl: _codecs.encode with an encoding other than latin1/utf-8 at byte 30");
}
END_TEST

/* _codecs.encode(text, 'latin1') reads the text by the one UTF-8 decoder
 * (common/utf8.h): an overlong sequence, which Python's unpickler refuses
 * in a BINUNICODE, is refused here too, and said not to be UTF-8. */
START_TEST(codecs_encode_latin1_reads_strict_utf8) {
    static const char e_acute[] = "c_codecs\nencode\n(X\x02\x00\x00\x00\xc3\xa9Vlatin1\ntR.";
    static const char overlong[] = "c_codecs\nencode\n(X\x02\x00\x00\x00\xc1\xa9Vlatin1\ntR.";
    static const char wide[] = "c_codecs\nencode\n(X\x02\x00\x00\x00\xc4\x80Vlatin1\ntR.";
    pk_ctx *c;
    ck_assert_int_eq(dck_pk_ctx_create("test.pkl", NULL, &dck_pk_torch_handlers, &c), DCK_OK);
    pk_node *root;
    size_t used;
    ck_assert_int_eq(dck_pk_load(c, (const uint8_t *)e_acute, sizeof e_acute - 1, 0, &root, &used), DCK_OK);
    ck_assert_int_eq(root->kind, PK_BYTES);
    ck_assert_uint_eq(root->u.s.len, 1);
    ck_assert_uint_eq((unsigned char)root->u.s.p[0], 0xe9);
    ck_assert_int_eq(dck_pk_load(c, (const uint8_t *)overlong, sizeof overlong - 1, 0, &root, &used),
                     DCK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "_codecs.encode latin1 text that is not UTF-8"));
    ck_assert_int_eq(dck_pk_load(c, (const uint8_t *)wide, sizeof wide - 1, 0, &root, &used), DCK_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "_codecs.encode latin1 text with a code point above 255"));
    dck_pk_ctx_free(c);
}
END_TEST

/* Quantized tensors (detcheck-formats(7), VALUES: they were opaque, so two files whose
 * quantized data differed verified as equal): the stored integers are a
 * tensor of the storage's dtype, its quantizer parameters values or
 * tensors named after it. */
#define QT_HEAD "\x80\x02}(X\x01\x00\x00\x00w" "ctorch._utils\n_rebuild_qtensor\n("
#define QT_STORAGE(type, key, n) "(X\x07\x00\x00\x00storage" "ctorch\n" type "\nX\x01\x00\x00\x00" key \
    "X\x03\x00\x00\x00" "cpuK" n "tQ"
#define QT_HOOKS "ccollections\nOrderedDict\n)R"
#define QT_TENSOR(storage, n) "ctorch._utils\n_rebuild_tensor_v2\n(" storage "K\x00(K" n "t(K\x01t\x89" QT_HOOKS "tR"

START_TEST(quantized_tensors) {
    static const char per_tensor[] =
        QT_HEAD QT_STORAGE("QInt8Storage", "0", "\x06") "K\x00(K\x02K\x03t(K\x03K\x01t"
        "(ctorch\nper_tensor_affine\nG?\xe0\x00\x00\x00\x00\x00\x00K\x03t\x89" QT_HOOKS "tRu.";
    static const char per_channel[] =
        QT_HEAD QT_STORAGE("QUInt8Storage", "0", "\x06") "K\x00(K\x02K\x03t(K\x03K\x01t"
        "(ctorch\nper_channel_affine\n" QT_TENSOR(QT_STORAGE("DoubleStorage", "1", "\x02"), "\x02")
        QT_TENSOR(QT_STORAGE("LongStorage", "2", "\x02"), "\x02") "K\x01t\x89" QT_HOOKS "tRu.";
    static const char odd_scheme[] =
        QT_HEAD QT_STORAGE("QInt8Storage", "0", "\x06") "K\x00(K\x06t(K\x01t"
        "(ctorch\nper_tensor_symmetric\nG?\xe0\x00\x00\x00\x00\x00\x00K\x03t\x89" QT_HOOKS "tRu.";
    collected c;
    ck_assert_int_eq(load_walk(per_tensor, sizeof per_tensor - 1, NULL, &c), DCK_OK);
    ck_assert_int_eq(c.tensors, 1);
    ck_assert_str_eq(value_of(&c, "w.qscheme"), "per_tensor_affine");
    ck_assert_str_eq(value_of(&c, "w.scale"), "0.5");
    ck_assert_str_eq(value_of(&c, "w.zero_point"), "3");
    ck_assert_int_eq(load_walk(per_channel, sizeof per_channel - 1, NULL, &c), DCK_OK);
    ck_assert_int_eq(c.tensors, 3); /* w, w.scale, w.zero_point */
    ck_assert_str_eq(value_of(&c, "w.qscheme"), "per_channel_affine");
    ck_assert_str_eq(value_of(&c, "w.axis"), "1");
    ck_assert_ptr_null(value_of(&c, "w.scale"));
    ck_assert_int_eq(load_walk(odd_scheme, sizeof odd_scheme - 1, NULL, &c), DCK_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "qscheme per_tensor_symmetric"));
    /* the stored integers have the storage's dtype */
    pk_ctx *ctx;
    ck_assert_int_eq(dck_pk_ctx_create("q", NULL, &dck_pk_torch_handlers, &ctx), DCK_OK);
    pk_node *root;
    size_t used;
    ck_assert_int_eq(dck_pk_load(ctx, (const uint8_t *)per_channel, sizeof per_channel - 1, 0, &root, &used),
                     DCK_OK);
    const pk_node *w = dck_pk_get(root, "w");
    ck_assert_int_eq(w->kind, PK_TENSOR);
    ck_assert_int_eq(w->u.tensor->dtype, DCK_U8);
    ck_assert_int_eq(dck_pk_check_storages_used(ctx, "q"), DCK_OK);
    dck_pk_ctx_free(ctx);
}
END_TEST

/* A storage no known rebuild function takes is an error that names it
 * (and the function it went to), not bytes that silently go unhashed. */
START_TEST(unread_storage) {
    static const char sparse[] = "\x80\x02}(X\x01\x00\x00\x00w" "ctorch._utils\n_rebuild_sparse_tensor\n("
                                 QT_STORAGE("FloatStorage", "7", "\x02") "K\x00tRu.";
    static const char stray[] = "\x80\x02}(X\x01\x00\x00\x00s" QT_STORAGE("FloatStorage", "7", "\x02") "u.";
    /* found by fuzz_pickle: a storage among the arguments of NEWOBJ of an
     * int (no global to name) */
    static const char newobj[] = "\x80\x02K\x01(" QT_STORAGE("FloatStorage", "7", "\x02") "t\x81.";
    const char *pk[3] = {sparse, stray, newobj};
    size_t len[3] = {sizeof sparse - 1, sizeof stray - 1, sizeof newobj - 1};
    const char *want[3] = {"f.pt: storage 7 (FloatStorage) is read by torch._utils._rebuild_sparse_tensor",
                           "f.pt: storage 7 (FloatStorage) is not read by any tensor",
                           "f.pt: storage 7 (FloatStorage) is not read by any tensor"};
    for (int k = 0; k < 3; k++) {
        pk_ctx *ctx;
        ck_assert_int_eq(dck_pk_ctx_create("f.pt", NULL, &dck_pk_torch_handlers, &ctx), DCK_OK);
        pk_node *root;
        size_t used;
        ck_assert_int_eq(dck_pk_load(ctx, (const uint8_t *)pk[k], len[k], 0, &root, &used), DCK_OK);
        ck_assert_int_eq(dck_pk_check_storages_used(ctx, "f.pt"), DCK_ERR_UNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(dck_last_error(), want[k]));
        dck_pk_ctx_free(ctx);
    }
}
END_TEST

/* A list of 3000 ints referenced 5000 times through the memo: 25 KB of
 * pickle, 90 MB of value text. The walk stops at PK_MAX_VALUE_BYTES. */
START_TEST(shared_list_value_limit) {
    size_t refs = 5000, k = 0;
    char *p = malloc(16 + 3 * 3000 + 2 * refs + 16);
    p[k++] = ']';
    p[k++] = 'q';
    p[k++] = 0;
    p[k++] = '(';
    for (int i = 0; i < 3000; i++) {
        p[k++] = 'M';
        p[k++] = (char)(i & 255);
        p[k++] = (char)(i >> 8);
    }
    p[k++] = 'e';
    p[k++] = ']';
    p[k++] = '(';
    for (size_t i = 0; i < refs; i++) {
        p[k++] = 'h';
        p[k++] = 0;
    }
    p[k++] = 'e';
    p[k++] = 0x86; /* TUPLE2: (list, [list, list, ...]) */
    p[k++] = '.';
    collected c;
    ck_assert_int_eq(load_walk(p, k, NULL, &c), DCK_ERR_LIMIT);
    ck_assert_ptr_nonnull(strstr(dck_last_error(), "values take more than 64 MiB"));
    /* the same list 3 times is fine */
    memcpy(p + 4 + 3 * 3000 + 3, "h\0h\0h\0e\x86.", 9);
    ck_assert_int_eq(load_walk(p, 4 + 3 * 3000 + 3 + 9, NULL, &c), DCK_OK);
    ck_assert_int_eq(c.n, 4);
    free(p);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("pickle");
    TCase *c = tcase_create("unpickler");
    tcase_set_timeout(c, 60);
    tcase_add_test(c, protocols_0_to_5_same_values);
    tcase_add_test(c, never_calls);
    tcase_add_test(c, opaque_object_state);
    tcase_add_test(c, tensor_and_tensor_limit);
    tcase_add_test(c, hostile_inputs);
    tcase_add_test(c, rebuild_from_type_loop);
    tcase_add_test(c, deep_nesting);
    tcase_add_test(c, cycle);
    tcase_add_test(c, shared_reference_explosion);
    tcase_add_test(c, regression_fuzz_slow_dag);
    tcase_add_test(c, object_and_memory_limits);
    tcase_add_test(c, dtype_names);
    tcase_add_test(c, opcode_table);
    tcase_add_test(c, allow_list_is_the_table);
    tcase_add_test(c, codecs_encode_latin1_reads_strict_utf8);
    tcase_add_test(c, quantized_tensors);
    tcase_add_test(c, unread_storage);
    tcase_add_test(c, shared_list_value_limit);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return tu_run(suite()); }

/* libFuzzer target: the restricted unpickler (load and walk), with limits
 * small enough that no input can make it use much memory. */
#include "formats/pickle.h"

#include <stdlib.h>

static dck_status on_tensor(void *ctx, const char *name, const pk_node *t) {
    (void)ctx;
    (void)name;
    const pk_tensor *tt = t->u.tensor;
    return tt->ndim > DCK_MAX_DIMS ? DCK_ERR_FORMAT : DCK_OK;
}
static dck_status on_array(void *ctx, const char *name, const pk_node *a) {
    (void)ctx;
    (void)name;
    (void)a;
    return DCK_OK;
}
static dck_status on_value(void *ctx, const char *name, const char *text) {
    (void)ctx;
    return name && text ? DCK_OK : DCK_ERR_INVALID;
}
static dck_status on_other(void *ctx, const char *name, const pk_node *n) {
    (void)ctx;
    (void)name;
    (void)n;
    return DCK_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pk_limits lim;
    dck_pk_limits_default(&lim);
    lim.max_bytes = (uint64_t)64 << 20;
    lim.max_nodes = (size_t)1 << 20;
    lim.max_memo = (size_t)1 << 16;
    pk_ctx *c;
    if (dck_pk_ctx_create("fuzz", &lim, &dck_pk_torch_handlers, &c)) return 0;
    size_t off = 0;
    /* several pickles back to back, as the legacy torch format has */
    for (int k = 0; k < 4 && off < size; k++) {
        pk_node *root;
        size_t used;
        if (dck_pk_load(c, data + off, size - off, (int64_t)off, &root, &used)) break;
        if (dck_pk_check_storages_used(c, "fuzz")) break;
        pk_walker w = {NULL, on_tensor, on_array, on_value, on_other, dck_pk_walk_budget(c)};
        if (dck_pk_walk(root, k ? "x" : "", &w, "fuzz")) break;
        off += used;
    }
    dck_pk_ctx_free(c);
    return 0;
}

/* A restricted unpickler written for detcheck, in three parts:
 *
 *   pickle_vm.h / pickle_vm.c  the machine: opcodes (one table), stack, memo,
 *                              limits, the tree of plain values;
 *   pickle_torch.c             the allow-list (one table {module, name,
 *                              handler}) of the globals checkpoints are made
 *                              of, and torch storages as persistent ids;
 *   pickle_walk.c              walking the tree into names, tensors, values.
 *
 * It never imports or calls anything. It builds a tree of plain values from
 * pickle protocols 0 to 5 and knows, by name only, the few globals that
 * checkpoints are made of: collections.OrderedDict, torch tensors
 * (_rebuild_tensor_v2/_v3, _rebuild_parameter, storages and dtypes),
 * torch.Size, _codecs.encode and NumPy arrays and scalars. Any other global
 * (argparse.Namespace, a custom class, a DCP metadata dataclass) becomes a
 * named opaque object that keeps its arguments, state and items, so the rest
 * of the file still loads and readers can look inside it by class name.
 *
 * Readers: dck_pk_ctx_create(label, NULL, &dck_pk_torch_handlers, &c). */
#ifndef DCK_PICKLE_H
#define DCK_PICKLE_H

#include "formats/pickle_vm.h"

/* ------------------------------------------------------------------ pickle_torch.c */

/* The handlers for checkpoints: torch, NumPy, collections, builtins,
 * _codecs; torch storages as persistent ids. */
extern const pk_handlers dck_pk_torch_handlers;

/* Every storage met by persistent_load must have been taken by a rebuild
 * function of the table (its bytes become a tensor): one that was not (an
 * unknown rebuild function such as a sparse or nested layout, a storage
 * pickled by itself) is an error naming it, never bytes that silently go
 * unhashed. */
dck_status dck_pk_check_storages_used(const pk_ctx *c, const char *label);

/* NumPy: dtype from a type string such as "<f4", "|u1", ">i8". Sets
 * *byteswap for big-endian multi-byte types. -1 when unsupported. */
int dck_pk_numpy_dtype(const char *descr, bool *byteswap);
/* torch: dtype from "float32", "bfloat16" ...; -1 unsupported. */
int dck_pk_torch_dtype(const char *name);
/* torch: dtype of a typed storage class ("FloatStorage"); -1 unsupported,
 * -2 UntypedStorage. */
int dck_pk_storage_dtype(const char *type_name);

/* ------------------------------------------------------------------ pickle_walk.c */

/* Canonical text of a scalar leaf (NONE, BOOL, INT, BIGINT, FLOAT) or of a
 * list/tuple of them; returns a malloc'd string or NULL (not a scalar). */
char *dck_pk_scalar_text(const pk_node *n);

/* Walking the tree. Names are dotted paths through dicts, lists, tuples and
 * opaque objects' state; tensors and arrays are reported with their names;
 * scalar leaves (and sequences of more than PK_SEQ_VALUE_MIN scalars, as one
 * value) are reported as values, bytes as "bytes:" and their XXH3-128;
 * strings are not values. Depth and visit budget are bounded. */
#define PK_SEQ_VALUE_MIN 8
typedef struct {
    void *ctx;
    dck_status (*tensor)(void *ctx, const char *name, const pk_node *t);  /* PK_TENSOR */
    dck_status (*ndarray)(void *ctx, const char *name, const pk_node *a); /* PK_NDARRAY */
    dck_status (*value)(void *ctx, const char *name, const char *text);
    /* Optional: other leaves (strings, opaque objects); may be NULL. */
    dck_status (*other)(void *ctx, const char *name, const pk_node *n);
    /* Objects the walk may reach (0: PK_MAX_WALK_VISITS). Shared references
     * make a tree out of a DAG; dck_pk_walk_budget bounds that by the size
     * of the pickle, so hostile sharing fails fast. */
    uint64_t max_visits;
} pk_walker;

#define PK_MAX_WALK_VISITS ((uint64_t)1 << 24)
/* Bytes of recorded values (names and texts) per walk: a list shared by
 * many references costs its text once per reference, so this bounds what a
 * small hostile pickle can add to a manifest. */
#define PK_MAX_VALUE_BYTES ((uint64_t)64 << 20)
/* 4 visits per object built, plus 100000. */
uint64_t dck_pk_walk_budget(const pk_ctx *c);

dck_status dck_pk_walk(const pk_node *root, const char *prefix, const pk_walker *w,
                       const char *label);

#endif

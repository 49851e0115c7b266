/* A restricted unpickler written for detcheck.
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
 * Every bound is checked: memo size, stack and mark depth, node count, bytes
 * of decoded text, tensor count (pk_limits). A hostile stream gets a
 * DCK_ERR_FORMAT / _TRUNCATED / _LIMIT status and a message naming the label
 * and the byte offset, never a crash or an unbounded allocation. */
#ifndef DCK_PICKLE_H
#define DCK_PICKLE_H

#include "formats/formats.h"

typedef enum {
    PK_NONE = 0,
    PK_BOOL,
    PK_INT,     /* fits in int64 */
    PK_BIGINT,  /* LONG1/LONG4/LONG beyond int64: little-endian two's complement in s */
    PK_FLOAT,
    PK_STR,     /* UTF-8 in s */
    PK_BYTES,   /* raw bytes in s */
    PK_TUPLE,
    PK_LIST,
    PK_SET,
    PK_DICT,
    PK_GLOBAL,  /* a class or function, by name */
    PK_OBJECT,  /* an opaque instance of an unknown global */
    PK_PERSID,  /* a persistent id the unpickler does not know */
    PK_STORAGE, /* a torch storage (persistent id 'storage') */
    PK_TENSOR,  /* a torch tensor (view of a storage) */
    PK_DTYPE,   /* a torch dtype (torch.float32 ...) */
    PK_NDARRAY, /* a NumPy array */
    PK_NPDTYPE  /* a NumPy dtype */
} pk_kind;

typedef struct pk_node pk_node;

typedef struct {
    pk_node *storage;       /* PK_STORAGE */
    int dtype;              /* dck_dtype of the elements, -1 unsupported */
    const char *dtype_name; /* torch name, for messages */
    uint64_t offset;        /* storage offset, elements */
    int ndim;
    uint64_t size[DCK_MAX_DIMS];
    int64_t stride[DCK_MAX_DIMS];
} pk_tensor;

typedef struct {
    pk_node *dtype;         /* PK_NPDTYPE */
    int ndim;
    uint64_t shape[DCK_MAX_DIMS];
    bool fortran;
    pk_node *data;          /* PK_BYTES, or a list of objects (dtype 'O') */
} pk_ndarray;

struct pk_node {
    pk_kind kind;
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            const char *p;  /* not NUL-terminated for BYTES; STR is NUL-terminated */
            size_t len;
            int64_t src;    /* offset of the bytes in the input, -1 when decoded */
        } s;
        struct {
            pk_node **items;
            size_t n, cap;
        } seq; /* TUPLE, LIST, SET */
        struct {
            pk_node **keys, **vals;
            size_t n, cap;
        } dict;
        struct {
            const char *module, *name;
        } global;
        struct {
            pk_node *cls;   /* PK_GLOBAL */
            pk_node *args;  /* REDUCE/NEWOBJ arguments or NULL */
            pk_node *state; /* BUILD state or NULL */
            pk_node *items; /* a LIST for APPENDS on the object, or NULL */
            pk_node *dict;  /* a DICT for SETITEMS on the object, or NULL */
        } obj;
        struct {
            pk_node *pid;
        } persid;
        struct {
            int dtype;             /* dck_dtype or -1 */
            const char *type_name; /* "FloatStorage", "UntypedStorage" ... */
            const char *key;       /* zip: data/<key>; legacy: storage key */
            const char *location;  /* "cpu", "cuda:0" ... */
            uint64_t numel;        /* elements (bytes for UntypedStorage) */
            /* legacy view metadata: a view of the root storage key */
            bool is_view;
            uint64_t view_offset, view_size;
        } storage;
        pk_tensor *tensor;
        struct {
            int dtype; /* dck_dtype or -1 */
            const char *name;
        } dtype;
        pk_ndarray *ndarray;
        struct {
            int dtype;      /* dck_dtype or -1 */
            char code[16];  /* "f4", "u4", "O", ... */
            char order;     /* '<', '>', '|', '=' */
        } npdtype;
    } u;
};

typedef struct {
    size_t max_memo;      /* memo key must be below this */
    size_t max_stack;     /* values on the stack */
    size_t max_marks;     /* nested MARKs */
    size_t max_nodes;     /* objects built */
    uint64_t max_bytes;   /* memory for objects and decoded text */
    uint64_t max_str;     /* one string or bytes object */
    size_t max_tensors;
} pk_limits;

void pk_limits_default(pk_limits *l);

typedef struct pk_ctx pk_ctx;

/* label names the input in messages ("model.pt: data.pkl"). base is added to
 * every s.src offset (the input's position in its file). */
dck_status pk_ctx_create(const char *label, const pk_limits *lim, pk_ctx **out);
void pk_ctx_free(pk_ctx *c);
/* Loads one pickle starting at data[0]; *used: bytes up to and including
 * STOP. Several pickles may be loaded into one context (legacy format); the
 * nodes live until pk_ctx_free. */
dck_status pk_load(pk_ctx *c, const uint8_t *data, size_t len, int64_t base, pk_node **root,
                   size_t *used);
size_t pk_tensor_count(const pk_ctx *c);
/* Every storage met so far (persistent ids of kind 'storage'). */
pk_node *const *pk_storages(const pk_ctx *c, size_t *n);

/* Helpers for readers. */
bool pk_is_global(const pk_node *n, const char *module, const char *name);
/* The class name of an object ("module.name"), or NULL. */
bool pk_object_is(const pk_node *n, const char *module, const char *name);
/* Dict lookup by string key; NULL if absent or not a dict. Objects: looks in
 * the BUILD state (dict, or (dict, slots) tuple) and in SETITEMS items. */
pk_node *pk_get(const pk_node *n, const char *key);
/* Integer (or bool) value; false if n is not one. */
bool pk_int(const pk_node *n, int64_t *out);
/* The items of a tuple or list (torch.Size included); NULL/0 otherwise. */
pk_node **pk_items(const pk_node *n, size_t *count);

/* Canonical text of a scalar leaf (NONE, BOOL, INT, BIGINT, FLOAT) or of a
 * list/tuple of them; returns a malloc'd string or NULL (not a scalar). */
char *pk_scalar_text(const pk_node *n);

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
     * make a tree out of a DAG; pk_walk_budget bounds that by the size of the
     * pickle, so hostile sharing fails fast. */
    uint64_t max_visits;
} pk_walker;

#define PK_MAX_WALK_VISITS ((uint64_t)1 << 24)
/* 4 visits per object built, plus 100000. */
uint64_t pk_walk_budget(const pk_ctx *c);

dck_status pk_walk(const pk_node *root, const char *prefix, const pk_walker *w, const char *label);

/* NumPy: dtype from a type string such as "<f4", "|u1", ">i8". Sets
 * *byteswap for big-endian multi-byte types. -1 when unsupported. */
int pk_numpy_dtype(const char *descr, bool *byteswap);
/* torch: dtype from "float32", "bfloat16" ...; -1 unsupported. */
int pk_torch_dtype(const char *name);
/* torch: dtype of a typed storage class ("FloatStorage"); -1 unsupported,
 * -2 UntypedStorage. */
int pk_storage_dtype(const char *type_name);

#endif

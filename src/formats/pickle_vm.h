/* The pickle virtual machine (pickle_vm.c): opcodes, stack, memo, limits
 * and the tree of plain values it builds. It knows no Python library: a
 * global is a name, and what REDUCE, NEWOBJ, BUILD or a persistent id of a
 * known name means comes from a handler table given to dck_pk_ctx_create
 * (pickle_torch.c holds the one for checkpoints). Without a table, or for any
 * name outside it, a call becomes a named opaque object that keeps its
 * arguments, state and items.
 *
 * Every bound is checked: memo size, stack and mark depth, node count, bytes
 * of decoded text, tensor count (pk_limits). A hostile stream gets a
 * DCK_ERR_FORMAT / _TRUNCATED / _LIMIT status and a message naming the label
 * and the byte offset, never a crash or an unbounded allocation.
 *
 * Naming: functions (symbols) are dck_pk_*; types are pk_*, constants PK_*. */
#ifndef DCK_PICKLE_VM_H
#define DCK_PICKLE_VM_H

#include "formats/formats.h"

/* ------------------------------------------------------------------ the node model */

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
    /* Quantized tensors (_rebuild_qtensor): the integers above are what is
     * stored; qscheme (torch's name, NULL for a plain tensor) and its
     * parameters say what they mean. Per tensor: qscale a PK_FLOAT, qzero a
     * PK_INT; per channel: both tensors, and qaxis. */
    const char *qscheme;
    pk_node *qscale, *qzero;
    int64_t qaxis;
    bool per_channel;
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
            /* taken by a rebuild function the handlers know (its bytes are
             * read); else, for the message, the first unknown global it was
             * an argument of */
            bool used;
            const pk_node *passed_to;
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

/* ------------------------------------------------------------------ limits */

typedef struct {
    size_t max_memo;      /* memo key must be below this */
    size_t max_stack;     /* values on the stack */
    size_t max_marks;     /* nested MARKs */
    size_t max_nodes;     /* objects built */
    uint64_t max_bytes;   /* memory for objects and decoded text */
    uint64_t max_str;     /* one string or bytes object */
    size_t max_tensors;
} pk_limits;

void dck_pk_limits_default(pk_limits *l);

/* ------------------------------------------------------------------ handler tables */

typedef struct pk_ctx pk_ctx;

/* A call of a global: REDUCE (fn(*args)) or NEWOBJ, NEWOBJ_EX, INST, OBJ
 * (cls.__new__(cls, *args)). */
typedef struct {
    pk_node *fn;   /* the PK_GLOBAL called */
    pk_node *args; /* as pickled (a tuple, or anything in a hostile stream) */
    pk_node **a;   /* args' items; NULL (n 0) when args is not a sequence */
    size_t n;
    int depth;     /* calls nested by handlers (dck_pk_reduce); 0 from an opcode.
                    * A handler that nests calls bounds the depth itself. */
} pk_call;

/* Sets *out to the value of the call, or to NULL for "keep it opaque" (the
 * VM then makes a PK_OBJECT of fn and args). */
typedef dck_status (*pk_call_fn)(pk_ctx *c, const pk_call *call, pk_node **out);

/* One allowed global: what REDUCE and NEWOBJ of module.name build (NULL: an
 * opaque object, as for every global that has no row). */
typedef struct {
    const char *module, *name;
    pk_call_fn reduce;
    pk_call_fn newobj;
} pk_global_rule;

typedef struct {
    const pk_global_rule *globals; /* the allow-list: nothing else is interpreted */
    size_t nglobals;
    /* PERSID / BINPERSID: sets *out (NULL handler: a PK_PERSID node). */
    dck_status (*persistent_load)(pk_ctx *c, pk_node *pid, pk_node **out);
    /* BUILD on anything but an opaque object, whose state the VM keeps
     * itself (NULL handler, or a kind the handler ignores: no effect). */
    dck_status (*build)(pk_ctx *c, pk_node *obj, pk_node *state);
} pk_handlers;

/* ------------------------------------------------------------------ the machine */

/* label names the input in messages ("model.pt: data.pkl"); lim NULL: the
 * defaults; handlers NULL: every global stays opaque. */
dck_status dck_pk_ctx_create(const char *label, const pk_limits *lim, const pk_handlers *handlers,
                             pk_ctx **out);
void dck_pk_ctx_free(pk_ctx *c);
/* Loads one pickle starting at data[0]; *used: bytes up to and including
 * STOP. base is added to every s.src offset (the input's position in its
 * file). Several pickles may be loaded into one context (legacy format); the
 * nodes live until dck_pk_ctx_free. */
dck_status dck_pk_load(pk_ctx *c, const uint8_t *data, size_t len, int64_t base, pk_node **root,
                       size_t *used);
size_t dck_pk_node_count(const pk_ctx *c);
/* Tensor nodes made so far (dck_pk_new_tensor). */
size_t dck_pk_tensor_count(const pk_ctx *c);
/* Every storage met so far (added by dck_pk_add_storage). */
pk_node *const *dck_pk_storages(const pk_ctx *c, size_t *n);

/* ------------------------------------------------------------------ reading nodes */

bool dck_pk_is_global(const pk_node *n, const char *module, const char *name);
/* An opaque object of class module.name. */
bool dck_pk_object_is(const pk_node *n, const char *module, const char *name);
/* Dict lookup by string key; NULL if absent or not a dict. Objects: looks in
 * the BUILD state (dict, or (dict, slots) tuple) and in SETITEMS items. */
pk_node *dck_pk_get(const pk_node *n, const char *key);
/* Integer (or bool) value; false if n is not one. */
bool dck_pk_int(const pk_node *n, int64_t *out);
/* The items of a tuple, list or set; NULL/0 otherwise. */
pk_node **dck_pk_items(const pk_node *n, size_t *count);

/* ------------------------------------------------------------------ for handlers
 * Building nodes inside the context's accounting (every allocation counts
 * against max_nodes / max_bytes). On failure they return NULL or a status
 * with its message set. */
pk_node *dck_pk_new_node(pk_ctx *c, pk_kind k, dck_status *st);
void *dck_pk_alloc(pk_ctx *c, size_t n, dck_status *st);
/* A STR or BYTES node: a copy of p (NUL-terminated), except BYTES with src
 * >= 0, which point into the input. */
pk_node *dck_pk_new_str(pk_ctx *c, const char *p, size_t len, int64_t src, pk_kind k,
                        dck_status *st);
dck_status dck_pk_seq_push(pk_ctx *c, pk_node *seq, pk_node *item);
dck_status dck_pk_dict_set(pk_ctx *c, pk_node *d, pk_node *k, pk_node *v);
/* A PK_TENSOR node with a zeroed pk_tensor, within max_tensors. */
dck_status dck_pk_new_tensor(pk_ctx *c, pk_node **out);
dck_status dck_pk_add_storage(pk_ctx *c, pk_node *storage);
/* "LABEL: WHAT at byte N" with status s. */
dck_status dck_pk_error(pk_ctx *c, dck_status s, const char *what);
/* REDUCE of fn with args through the context's handlers, nested depth deep
 * (handlers that call another global, such as _rebuild_from_type). */
dck_status dck_pk_reduce(pk_ctx *c, pk_node *fn, pk_node *args, int depth, pk_node **out);

#endif

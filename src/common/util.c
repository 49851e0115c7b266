/* Errors, allocation, dtypes, names and groups. */
#include "common/common.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ errors */

static _Thread_local char last_error[DCK_ERROR_MESSAGE_MAX];

const char *dck_strerror(dck_status s) {
    switch (s) {
    case DCK_OK: return "success";
    case DCK_ERR_INVALID: return "invalid argument";
    case DCK_ERR_IO: return "input/output error";
    case DCK_ERR_TRUNCATED: return "truncated input";
    case DCK_ERR_FORMAT: return "malformed input";
    case DCK_ERR_UNSUPPORTED: return "unsupported input";
    case DCK_ERR_LIMIT: return "input exceeds a safety limit";
    case DCK_ERR_LAYOUT: return "shards overlap, leave gaps or disagree";
    case DCK_ERR_NOMEM: return "out of memory";
    case DCK_ERR_NODEVICE: return "no GPU available";
    case DCK_ERR_DEVICE: return "GPU error";
    case DCK_ERR_COMM: return "communication error";
    case DCK_ERR_MISMATCH: return "inputs do not match";
    }
    return "unknown error";
}

const char *dck_last_error(void) { return last_error; }

void dck_clear_error(void) { last_error[0] = 0; }

dck_status dck_set_error(dck_status s, const char *fmt, ...) {
    /* Format into a scratch buffer first: callers may pass dck_last_error()
     * itself as an argument, to wrap the message with context. */
    char buf[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof buf) {
        /* never cut in silence (two long names would read the same): the
         * end says so, after the last whole UTF-8 character that fits */
        enum { MARK = 48 };
        size_t p = sizeof buf - MARK;
        p = dck_utf8_back(buf, p);
        snprintf(buf + p, sizeof buf - p, "... (message cut: %d bytes in all)", n);
    }
    memcpy(last_error, buf, sizeof buf);
    return s;
}

dck_status dck_oom(const char *what) {
    if (what && *what) return dck_set_error(DCK_ERR_NOMEM, "%s: out of memory", what);
    return dck_set_error(DCK_ERR_NOMEM, "out of memory");
}

const char *dck_version(void) { return DCK_VERSION_STRING; }
unsigned dck_version_number(void) { return DCK_VERSION_NUMBER; }
/* The library's allocator may differ from the caller's (static runtimes). */
void dck_free(void *p) { free(p); }

/* ------------------------------------------------------------------ memory */

void *dck_xmalloc(size_t n) { return malloc(n ? n : 1); }
void *dck_xcalloc(size_t n, size_t m) { return calloc(n ? n : 1, m ? m : 1); }
void *dck_xrealloc(void *p, size_t n) { return realloc(p, n ? n : 1); }

/* An array about to be filled whole: its pages faulted in by one call
 * rather than one page fault each (a fault costs more than zeroing the
 * page it brings; 100k tensors fill tens of megabytes). Whole pages inside
 * the block only; where the kernel lacks MADV_POPULATE_WRITE (5.14) the
 * pages fault in as they are touched, as before. */
void dck_prefault(void *p, size_t n) {
#ifdef MADV_POPULATE_WRITE
    const uintptr_t pg = 4096;
    if (!p || n < ((size_t)256 << 10)) return;
    uintptr_t a = ((uintptr_t)p + pg - 1) & ~(pg - 1), e = ((uintptr_t)p + n) & ~(pg - 1);
    if (e > a) madvise((void *)a, e - a, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)n;
#endif
}

char *dck_strdup(const char *s) { return s ? dck_strndup(s, strlen(s)) : NULL; }

char *dck_strndup(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

char *dck_path_join(const char *dir, const char *name) {
    if (!dir || !*dir || name[0] == '/') return dck_strdup(name);
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t k = a;
    if (dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

int dck_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > 256) n = 256;
    return (int)n;
}

dck_status dck_grow(void **ptr, size_t *cap, size_t need, size_t sz) {
    if (need <= *cap) return DCK_OK;
    size_t nc = *cap ? *cap : 8;
    while (nc < need) {
        if (nc > SIZE_MAX / 2 / sz) return dck_oom(NULL);
        nc *= 2;
    }
    void *p = realloc(*ptr, nc * sz);
    if (!p) return dck_oom(NULL);
    *ptr = p;
    *cap = nc;
    return DCK_OK;
}

dck_status dck_value_push(dck_manifest_value **arr, size_t *n, size_t *cap, const char *name,
                          const char *value) {
    dck_status s = dck_grow((void **)arr, cap, *n + 1, sizeof **arr);
    if (s) return s;
    char *nm = dck_strdup(name), *v = dck_strdup(value);
    if (!nm || !v) {
        free(nm);
        free(v);
        return dck_oom(NULL);
    }
    (*arr)[(*n)++] = (dck_manifest_value){nm, v};
    return DCK_OK;
}

/* Arrays arrive sorted more often than not (spans and tasks in file order,
 * tensors in a file's order): n - 1 comparisons say so, where qsort would
 * still make n log n / 2 and copy every element through its buffer. A
 * sorted array left as it is is what a stable sort gives. */
void dck_qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *)) {
    const char *p = base;
    for (size_t i = 1; i < n; i++)
        if (cmp(p + (i - 1) * size, p + i * size) > 0) {
            qsort(base, n, size, cmp);
            return;
        }
}

int dck_has_suffix(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* ------------------------------------------------------------------ dtypes */

static const struct {
    const char *name;
    size_t size;
    int is_float;
} dtypes[DCK_DTYPE_COUNT] = {
    [DCK_BOOL] = {"BOOL", 1, 0},       [DCK_U8] = {"U8", 1, 0},
    [DCK_I8] = {"I8", 1, 0},           [DCK_I16] = {"I16", 2, 0},
    [DCK_U16] = {"U16", 2, 0},         [DCK_F16] = {"F16", 2, 1},
    [DCK_BF16] = {"BF16", 2, 1},       [DCK_I32] = {"I32", 4, 0},
    [DCK_U32] = {"U32", 4, 0},         [DCK_F32] = {"F32", 4, 1},
    [DCK_F64] = {"F64", 8, 1},         [DCK_I64] = {"I64", 8, 0},
    [DCK_U64] = {"U64", 8, 0},         [DCK_F8_E4M3] = {"F8_E4M3", 1, 1},
    [DCK_F8_E5M2] = {"F8_E5M2", 1, 1},
    /* complex: two floats per element (digest v1's C64 and C128) */
    [DCK_C64] = {"C64", 8, 1},         [DCK_C128] = {"C128", 16, 1},
};

const char *dck_dtype_name(dck_dtype t) {
    return (unsigned)t < DCK_DTYPE_COUNT ? dtypes[t].name : "?";
}

dck_status dck_dtype_from_name(const char *name, dck_dtype *out) {
    if (!name) return dck_set_error(DCK_ERR_FORMAT, "dtype name missing (NULL)");
    for (int i = 0; i < DCK_DTYPE_COUNT; i++)
        if (name[0] == dtypes[i].name[0] && !strcmp(name, dtypes[i].name)) {
            *out = (dck_dtype)i;
            return DCK_OK;
        }
    return dck_set_error(DCK_ERR_FORMAT, "unknown dtype \"%.200s\"", name);
}

size_t dck_dtype_size(dck_dtype t) { return (unsigned)t < DCK_DTYPE_COUNT ? dtypes[t].size : 0; }

int dck_dtype_is_float(dck_dtype t) {
    return (unsigned)t < DCK_DTYPE_COUNT ? dtypes[t].is_float : 0;
}

/* "[2, 3] of F32" for messages. */
static const char *shape_text(char *buf, size_t n, dck_dtype t, const uint64_t *shape, int ndim) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%llu", i ? ", " : "",
                              (unsigned long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "] of %s", dck_dtype_name(t));
    return buf;
}

dck_status dck_shape_bytes(dck_dtype t, const uint64_t *shape, int ndim, uint64_t *nbytes) {
    if (ndim < 0 || ndim > DCK_MAX_DIMS)
        return dck_set_error(DCK_ERR_LIMIT, "shape of %d dimensions (limit %d)", ndim,
                             DCK_MAX_DIMS);
    if (ndim && !shape) return dck_set_error(DCK_ERR_INVALID, "shape missing (NULL)");
    uint64_t n = dck_dtype_size(t);
    int zero = 0;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) zero = 1;
        else if (n > UINT64_MAX / shape[i]) {
            char buf[400];
            return dck_set_error(DCK_ERR_LIMIT, "shape %s: byte size overflows 64 bits",
                                 shape_text(buf, sizeof buf, t, shape, ndim));
        } else n *= shape[i];
    }
    /* Even an empty tensor's other dims must not overflow. */
    *nbytes = zero ? 0 : n;
    return DCK_OK;
}

/* ------------------------------------------------------------------ names */

static inline int is_dec(unsigned c) { return c - '0' < 10u; } /* isdigit() in every locale */

int dck_name_compare(const char *a, const char *b) {
    const unsigned char *p = (const unsigned char *)a, *q = (const unsigned char *)b;
    /* Skip the common prefix at memcmp speed. Every digit run that ends
     * inside it compares equal, so the walk below may start at the run the
     * strings differ in (backing up to its first digit) and give the same
     * answer as a walk from the start. */
    size_t k = 0;
    while (p[k] == q[k]) {
        if (!p[k]) return 0;
        k++;
    }
    while (k && is_dec(p[k - 1])) k--;
    p += k;
    q += k;
    while (*p && *q) {
        if (is_dec(*p) && is_dec(*q)) {
            const unsigned char *ps = p, *qs = q;
            while (*ps == '0' && is_dec(ps[1])) ps++;
            while (*qs == '0' && is_dec(qs[1])) qs++;
            const unsigned char *pe = ps, *qe = qs;
            while (is_dec(*pe)) pe++;
            while (is_dec(*qe)) qe++;
            size_t lp = (size_t)(pe - ps), lq = (size_t)(qe - qs);
            if (lp != lq) return lp < lq ? -1 : 1;
            int c = memcmp(ps, qs, lp);
            if (c) return c < 0 ? -1 : 1;
            /* Equal values: fewer leading zeros first, for a total order. */
            if ((pe - p) != (qe - q)) return (pe - p) < (qe - q) ? -1 : 1;
            p = pe;
            q = qe;
            continue;
        }
        if (*p != *q) return *p < *q ? -1 : 1;
        p++;
        q++;
    }
    return *p ? 1 : (*q ? -1 : 0);
}

static const char *group_names[DCK_GROUP_COUNT] = {"weights", "optimizer", "rng", "other"};

const char *dck_group_name(dck_group g) {
    return (unsigned)g < DCK_GROUP_COUNT ? group_names[g] : "?";
}

dck_status dck_group_from_name(const char *name, dck_group *out) {
    if (!name) return dck_set_error(DCK_ERR_FORMAT, "group name missing (NULL)");
    for (int i = 0; i < DCK_GROUP_COUNT; i++)
        if (!strcmp(name, group_names[i])) {
            *out = (dck_group)i;
            return DCK_OK;
        }
    return dck_set_error(DCK_ERR_FORMAT,
                         "unknown group \"%.200s\" (weights, optimizer, rng or other)", name);
}

/* ASCII lowering: the words are ASCII, and the group of a name must not
 * depend on the caller's locale (tolower() in the C locale the tool runs
 * in is the same; a byte test, no call per byte). */
static unsigned char lower(unsigned char c) { return c - 'A' < 26 ? (unsigned char)(c + ('a' - 'A')) : c; }

/* Case-insensitive comparison of one dotted/slashed component. */
static int comp_eq(const char *c, size_t n, const char *word) {
    size_t w = strlen(word);
    if (n != w) return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)c[i]) != (unsigned char)word[i]) return 0;
    return 1;
}

static int comp_has(const char *c, size_t n, const char *word) {
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= n; i++) {
        size_t k = 0;
        while (k < w && lower((unsigned char)c[i + k]) == (unsigned char)word[k]) k++;
        if (k == w) return 1;
    }
    return 0;
}

/* The group rules (documented in detcheck-hash(1)), applied to the name's
 * components split at '.', '/' and ':'; the first rule that matches any
 * component wins, in this order:
 *   optimizer: a component "optimizer", "optim", "optimizer_state",
 *              "param_groups", "master", or containing "exp_avg",
 *              "momentum", "adam", "optimizer";
 *   rng:       a component starting with "rng" or containing "random",
 *              "generator", "rng_state";
 *   other:     a component "step", "epoch", "iteration", "iter",
 *              "scheduler", "lr_scheduler", "config", "args", "metadata",
 *              "loss_scale", "_metadata";
 *   weights:   everything else. */
/* The whole-component words by length (words of length n: eq_words
 * [eq_from[n], eq_from[n + 1])), each with its rule: 1 optimizer, 3 other. */
typedef struct {
    const char *w;
    int cls;
} word;
static const word eq_words[] = {
    {"step", 3}, {"iter", 3}, {"args", 3},                                   /* 4 */
    {"optim", 1}, {"epoch", 3},                                              /* 5 */
    {"master", 1}, {"config", 3},                                            /* 6 */
    {"metadata", 3},                                                         /* 8 */
    {"optimizer", 1}, {"iteration", 3}, {"scheduler", 3}, {"_metadata", 3}, /* 9 */
    {"loss_scale", 3},                                                       /* 10 */
    {"param_groups", 1}, {"lr_scheduler", 3},                                /* 12 */
    {"distrib_optim", 1},                                                    /* 13 */
    {"optimizer_state", 1},                                                  /* 15 */
};
static const unsigned char eq_from[17] = {0, 0, 0, 0, 0, 3, 5, 7, 7, 8, 12, 13, 13, 15, 16, 16, 17};

/* The rule of the word the lowered component equals, 0 none. */
static int eq_word(const char *low, size_t n) {
    if (n >= sizeof eq_from - 1) return 0;
    for (unsigned i = eq_from[n]; i < eq_from[n + 1]; i++)
        if (eq_words[i].w[0] == low[0] && !memcmp(low, eq_words[i].w, n)) return eq_words[i].cls;
    return 0;
}

static int at(const char *low, size_t n, size_t i, const char *w, size_t wn) {
    return n - i >= wn && !memcmp(low + i, w, wn);
}

/* The substring rules in one pass over a lowered component: 1 optimizer
 * ("exp_avg", "momentum", "adam", "optimizer"), 2 rng ("random",
 * "generator", "rng_state"), 0 neither (the first optimizer hit wins). */
static int substrings(const char *low, size_t n) {
    int rng = 0;
    /* the words are 4 bytes or more; a position is looked at only where
     * its first two bytes start one (a switch per byte, taken through a
     * jump table, mispredicted most of the time, cost more than the rest) */
#define P2(a, b) ((unsigned)(unsigned char)(a) | (unsigned)(unsigned char)(b) << 8)
    for (size_t i = 0; i + 4 <= n; i++) {
        unsigned k = P2(low[i], low[i + 1]);
        if (k != P2('e', 'x') && k != P2('m', 'o') && k != P2('a', 'd') && k != P2('o', 'p') &&
            k != P2('r', 'a') && k != P2('r', 'n') && k != P2('g', 'e'))
            continue;
        switch (low[i]) {
        case 'e': if (at(low, n, i, "exp_avg", 7)) return 1; break;
        case 'm': if (at(low, n, i, "momentum", 8)) return 1; break;
        case 'a': if (at(low, n, i, "adam", 4)) return 1; break;
        case 'o': if (at(low, n, i, "optimizer", 9)) return 1; break;
        case 'r': if (at(low, n, i, "random", 6) || at(low, n, i, "rng_state", 9)) rng = 1; break;
        case 'g': if (at(low, n, i, "generator", 9)) rng = 1; break;
        default: break;
        }
    }
#undef P2
    return rng ? 2 : 0;
}

/* The group rules (documented in detcheck-hash(1)), applied to the name's
 * components split at '.', '/' and ':'; the first rule that matches any
 * component wins, in this order:
 *   optimizer: a component "optimizer", "optim", "optimizer_state",
 *              "param_groups", "master", or containing "exp_avg",
 *              "momentum", "adam", "optimizer";
 *   rng:       a component starting with "rng" or containing "random",
 *              "generator", "rng_state";
 *   other:     a component "step", "epoch", "iteration", "iter",
 *              "scheduler", "lr_scheduler", "config", "args", "metadata",
 *              "loss_scale", "_metadata";
 *   weights:   everything else.
 * Components are compared case-insensitively (ASCII), each lowered once
 * into a buffer as the name is read. */
/* One component [c, c + n), lowered into low when it fits (n < cap):
 * 1 optimizer, 2 rng, 3 other, 0 none of them. */
static int component_class(const char *c, size_t n, const char *low, size_t cap) {
    if (n >= cap) { /* longer than any word: compared in place */
        if (comp_eq(c, n, "optimizer") || comp_eq(c, n, "optim") || comp_eq(c, n, "distrib_optim") ||
            comp_eq(c, n, "optimizer_state") || comp_eq(c, n, "param_groups") ||
            comp_eq(c, n, "master") || comp_has(c, n, "exp_avg") || comp_has(c, n, "momentum") ||
            comp_has(c, n, "adam") || comp_has(c, n, "optimizer"))
            return 1;
        if (comp_eq(c, 3, "rng") || comp_has(c, n, "random") || comp_has(c, n, "generator") ||
            comp_has(c, n, "rng_state"))
            return 2;
        return 0; /* no "other" word is this long */
    }
    if (n < 3) return 0; /* shorter than every word and "rng" */
    int sub = substrings(low, n), eq = eq_word(low, n);
    if (sub == 1 || eq == 1) return 1;
    if (!memcmp(low, "rng", 3) || sub == 2) return 2;
    return eq;
}

/* One pass over the name, lowering each component as it goes (no strcspn
 * and no copy per component: this runs once per tensor, and a checkpoint
 * may hold a million). */
dck_group dck_group_of_name(const char *name) {
    int found_rng = 0, found_other = 0;
    char low[128];
    const char *c = name;
    size_t n = 0;
    for (const char *s = name;; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch && ch != '.' && ch != '/' && ch != ':') {
            if (n < sizeof low) low[n] = (char)lower(ch);
            n++;
            continue;
        }
        if (n) {
            int k = component_class(c, n, low, sizeof low);
            if (k == 1) return DCK_GROUP_OPTIMIZER;
            if (k == 2) found_rng = 1;
            else if (k == 3) found_other = 1;
        }
        if (!ch) break;
        c = s + 1;
        n = 0;
    }
    return found_rng ? DCK_GROUP_RNG : found_other ? DCK_GROUP_OTHER : DCK_GROUP_WEIGHTS;
}

char *dck_rel_join(const char *a, const char *b) {
    if (!a || !*a) return dck_strdup(b);
    return dck_path_join(a, b);
}

bool dck_path_exists_in(const char *dir, const char *name, bool want_dir) {
    char *p = dck_path_join(dir, name);
    struct stat st;
    bool ok = p && stat(p, &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
    free(p);
    return ok;
}

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void dck_strv_free(char **v, size_t n) {
    for (size_t i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

dck_status dck_list_dir(const char *path, bool skip_hidden, char ***out, size_t *n) {
    *out = NULL;
    *n = 0;
    DIR *d = opendir(path);
    if (!d) return dck_set_error(DCK_ERR_IO, "%s: cannot open directory: %s", path, strerror(errno));
    size_t cap = 0;
    dck_status s = DCK_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || (skip_hidden && e->d_name[0] == '.')) continue;
        if ((s = dck_grow((void **)out, &cap, *n + 1, sizeof **out))) break;
        if (!((*out)[*n] = dck_strdup(e->d_name))) {
            s = dck_oom(NULL);
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (s) {
        dck_strv_free(*out, *n);
        *out = NULL;
        *n = 0;
        return s;
    }
    dck_qsort(*out, *n, sizeof **out, cmp_entry_name);
    return DCK_OK;
}

uint32_t dck_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

float dck_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

const char *dck_float_text(float v, char *buf, size_t n) {
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, n, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    return buf;
}

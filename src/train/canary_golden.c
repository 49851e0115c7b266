/* Canary golden files (canary.h; man detcheck-canary(1), LIMITS): written
 * with jansson by dck_canary_golden_write, read by a bounded parser of their
 * one layout, whose white space and strings (escapes, surrogate pairs,
 * UTF-8) are read by the JSON scanner's own code (common/json_scan.h), so a
 * golden file's text is read as every other JSON text of detcheck. */
#include "train/canary.h"
#include "common/json_scan.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Golden files are JSON in the one layout dck_canary_golden_write produces;
 * they are read by the bounded parser below rather than by jansson, whose tree costs
 * about 35 times the text (a 250 MiB file took 4 GB): here the text is read
 * once, with a cap derived from the run (dck_canary_golden_limit), and only
 * 16 bytes per digest are kept. Any JSON whitespace and any order of the
 * fields are accepted; unknown fields are refused (version 1 has no others). */
uint64_t dck_canary_golden_limit(long steps, size_t ntensors) {
    if (steps < 1) steps = 1;
    return ((uint64_t)1 << 20) + (uint64_t)ntensors * 1024 +
           (uint64_t)steps * (DCK_TAP_RECORDED * (uint64_t)ntensors + 1) * 48;
}

dck_status dck_canary_golden_write(const char *path, const dck_train_config *c, const dck_model *m,
                                   const dck_digest *step_roots, const dck_digest *digests) {
    size_t np = m->nparams;
    char *cfg = NULL;
    DCK_TRY(dck_train_config_json(c, &cfg));
    json_t *o = json_object(), *names = json_array(), *roots = json_array(), *steps = json_array();
    bool ok = o && names && roots && steps;
    ok = ok && !json_object_set_new(o, "detcheck_canary", json_integer(1));
    ok = ok && !json_object_set_new(o, "config", json_string(cfg));
    ok = ok && !json_object_set_new(o, "steps", json_integer(c->steps));
    for (size_t i = 0; ok && i < np; i++) ok = !json_array_append_new(names, json_string(m->params[i].name));
    char hex[33];
    for (long s = 1; ok && s <= c->steps; s++) {
        dck_digest_to_hex(step_roots[s - 1], hex);
        ok = !json_array_append_new(roots, json_string(hex));
        json_t *st = json_array();
        ok = ok && st;
        for (int p = 0; ok && p < DCK_TAP_RECORDED; p++)
            for (size_t i = 0; ok && i < np; i++) {
                dck_digest_to_hex(digests[((size_t)(s - 1) * DCK_TAP_RECORDED + (size_t)p) * np + i], hex);
                ok = !json_array_append_new(st, json_string(hex));
            }
        if (ok)
            ok = !json_array_append_new(steps, st);
        else
            json_decref(st);
    }
    ok = ok && !json_object_set(o, "tensors", names) && !json_object_set(o, "roots", roots) &&
         !json_object_set(o, "digests", steps);
    char *text = ok ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(names);
    json_decref(roots);
    json_decref(steps);
    json_decref(o);
    free(cfg);
    if (!text) return dck_oom("canary");
    size_t n = strlen(text);
    text[n] = '\n'; /* over the NUL: written with its length */
    /* the rule at the moment of writing: a file that appeared since the check stays */
    dck_status s =
        dck_output_write("--write-golden", path, "canary golden file", dck_canary_is_golden, NULL, 0, text, n + 1);
    free(text);
    return s;
}

/* The first bytes of every dck_canary_golden_write output: what --write-golden may
 * replace (dck_output_check). */
bool dck_canary_is_golden(const char *path) {
    static const char magic[] = "\"detcheck_canary\"";
    char buf[64];
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    size_t i = 0;
    while (i < n && buf[i] && strchr(" \t\r\n", buf[i])) i++;
    if (i >= n || buf[i++] != '{') return false;
    while (i < n && buf[i] && strchr(" \t\r\n", buf[i])) i++;
    return n - i >= sizeof magic - 1 && !memcmp(buf + i, magic, sizeof magic - 1);
}

#define GOLDEN_CONFIG_MAX (64u << 10) /* the identity JSON is well under 8 KiB */

/* The cursor of the golden parser. Its messages say "LABEL:LINE: why"; the
 * line is counted when a message needs it (strings hold no newline: a raw
 * one is a control character). */
typedef struct {
    const unsigned char *start, *p, *end;
    const char *label;
} gparse;

static long gp_line(const gparse *g) {
    long line = 1;
    for (const unsigned char *q = g->start; q < g->p; q++) line += *q == '\n';
    return line;
}

static dck_status gp_syntax(const gparse *g, const char *why) {
    return dck_set_error(DCK_ERR_FORMAT, "%s:%ld: not JSON: %s", g->label, gp_line(g), why);
}

static dck_status gp_bad(const gparse *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static dck_status gp_bad(const gparse *g, const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return dck_set_error(DCK_ERR_FORMAT, "%s:%ld: not a canary golden file: %s", g->label, gp_line(g), why);
}

static void gp_ws(gparse *g) { g->p = dck_json_skip_ws(g->p, g->end); }

/* After a value: ',' (true: another follows) or the closing byte. */
static dck_status gp_next(gparse *g, char close, bool *more) {
    gp_ws(g);
    if (g->p < g->end && *g->p == ',') {
        g->p++;
        *more = true;
        return DCK_OK;
    }
    if (g->p < g->end && *g->p == close) {
        g->p++;
        *more = false;
        return DCK_OK;
    }
    return gp_syntax(g, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
}

/* The golden parser's words for a character's fault (dck_json_char). */
static const char *const char_fault_why[] = {
    [DCK_JSON_CHAR_END] = "unterminated string",
    [DCK_JSON_CHAR_CONTROL] = "control character in a string",
    [DCK_JSON_CHAR_UTF8] = "invalid UTF-8", /* not used: named once the string is whole */
    [DCK_JSON_CHAR_ESCAPE] = "bad escape in a string",
    [DCK_JSON_CHAR_U_ESCAPE] = "bad \\u escape",
    [DCK_JSON_CHAR_LONE_LOW] = "lone low surrogate",
    [DCK_JSON_CHAR_LONE_HIGH] = "lone high surrogate",
    [DCK_JSON_CHAR_BAD_PAIR] = "bad surrogate pair",
};

/* A JSON string, decoded into buf (cap bytes with the NUL); what names
 * the field in messages. Longer strings are refused, not truncated. A byte
 * that starts no UTF-8 sequence is named after the string's other faults,
 * as the decoded text is checked whole. */
static dck_status gp_string(gparse *g, const char *what, char *buf, size_t cap, size_t *len) {
    gp_ws(g);
    if (g->p >= g->end || *g->p != '"') return gp_syntax(g, "expected a string");
    g->p++;
    size_t n = 0;
    bool utf8_bad = false;
    for (;;) {
        if (g->p >= g->end) return gp_syntax(g, "unterminated string");
        if (*g->p == '"') {
            g->p++;
            break;
        }
        if (*g->p >= 0x20 && *g->p < 0x80 && *g->p != '\\') { /* plain ASCII stands for itself */
            if (n + 1 >= cap) return gp_bad(g, "%s longer than %zu bytes", what, cap - 1);
            buf[n++] = (char)*g->p++;
            continue;
        }
        char out[4];
        size_t k, at;
        dck_json_char_fault f;
        size_t took = dck_json_char(g->p, g->end, out, &k, &f, &at);
        if (!took && f == DCK_JSON_CHAR_UTF8) {
            utf8_bad = true;
            out[0] = (char)*g->p;
            k = took = 1;
        }
        if (!took) return gp_syntax(g, char_fault_why[f]);
        if (k == 1 && !out[0]) return gp_bad(g, "%s holds a NUL character", what);
        if (n + k >= cap) return gp_bad(g, "%s longer than %zu bytes", what, cap - 1);
        memcpy(buf + n, out, k);
        n += k;
        g->p += took;
    }
    buf[n] = 0;
    if (utf8_bad) return gp_bad(g, "%s is not valid UTF-8", what);
    if (len) *len = n;
    return DCK_OK;
}

/* A JSON number that must be an integer in [lo, hi]. */
static dck_status gp_integer(gparse *g, const char *what, const char *want, long lo, long hi, long *v) {
    gp_ws(g);
    const char *s = (const char *)g->p;
    if (g->p < g->end && *g->p == '-') g->p++;
    const char *digits = (const char *)g->p;
    while (g->p < g->end && *g->p >= '0' && *g->p <= '9') g->p++;
    size_t nd = (size_t)((const char *)g->p - digits);
    if (nd == 0) return gp_bad(g, "%s must be %s", what, want);
    bool integer = true;
    while (g->p < g->end && *g->p && strchr(".eE+-0123456789", *g->p)) g->p++, integer = false;
    const char *e = (const char *)g->p;
    int len = (int)(e - s);
    if (!integer || (nd > 1 && digits[0] == '0'))
        return gp_bad(g, "%s must be %s, not %.*s", what, want, len > 32 ? 32 : len, s);
    long x = 0;
    bool big = nd > 18;
    for (const char *d = digits; !big && d < e; d++) x = x * 10 + (*d - '0');
    if (*s == '-') x = -x;
    if (big || x < lo || x > hi)
        return gp_bad(g, "%s %.*s out of range (%ld to %ld)", what, len > 32 ? 32 : len, s, lo, hi);
    *v = x;
    return DCK_OK;
}

/* Grows a digest array so that one more fits; bounded by the text (each
 * digest is 34 bytes of it). */
static dck_status gp_push(dck_digest **a, size_t *n, size_t *cap, dck_digest d) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        dck_digest *x = realloc(*a, nc * sizeof *x);
        if (!x) return dck_oom("canary");
        *a = x, *cap = nc;
    }
    (*a)[(*n)++] = d;
    return DCK_OK;
}

static dck_status gp_digest(gparse *g, const char *what, dck_digest *d) {
    char hex[40];
    dck_status s = gp_string(g, what, hex, sizeof hex, NULL);
    if (s == DCK_ERR_FORMAT && strstr(dck_last_error(), "longer than"))
        return gp_bad(g, "%s is not 32 hex digits", what);
    if (s) return s;
    if (dck_digest_from_hex(hex, d)) return gp_bad(g, "%s \"%s\" is not 32 lowercase hex digits", what, hex);
    return DCK_OK;
}

static dck_status gp_open(gparse *g, char open) {
    gp_ws(g);
    if (g->p >= g->end || *g->p != open) return gp_syntax(g, open == '[' ? "expected '['" : "expected '{'");
    g->p++;
    gp_ws(g);
    return DCK_OK;
}

static bool gp_empty(gparse *g, char close) {
    if (g->p < g->end && *g->p == close) return g->p++, true;
    return false;
}

enum { GF_VERSION, GF_CONFIG, GF_STEPS, GF_TENSORS, GF_ROOTS, GF_DIGESTS, GF_COUNT };
static const char *const golden_fields[GF_COUNT] = {"detcheck_canary", "config", "steps",
                                                    "tensors", "roots", "digests"};

void dck_canary_golden_release(dck_canary_golden *g) {
    free(g->config);
    free(g->names);
    free(g->roots);
    free(g->digests);
    memset(g, 0, sizeof *g);
}

static dck_status golden_field(gparse *g, int f, dck_canary_golden *out, size_t *nroots,
                               size_t *ndg, size_t *rows) {
    long v;
    size_t cap = 0, len = 0; /* len: set by the string fields before use; gcc -O3 cannot see it */
    bool more;
    switch (f) {
    case GF_VERSION:
        DCK_TRY(gp_integer(g, "the version (detcheck_canary)", "the integer 1", LONG_MIN / 2, LONG_MAX / 2, &v));
        if (v != 1)
            return dck_set_error(DCK_ERR_UNSUPPORTED, "%s:%ld: canary golden version %ld (this detcheck reads 1)",
                                 g->label, gp_line(g), v);
        return DCK_OK;
    case GF_STEPS:
        DCK_TRY(gp_integer(g, "steps", "an integer", 1, DCK_CANARY_MAX_STEPS, &v));
        out->steps = v;
        return DCK_OK;
    case GF_CONFIG:
        if (!(out->config = malloc(GOLDEN_CONFIG_MAX))) return dck_oom("canary");
        return gp_string(g, "config", out->config, GOLDEN_CONFIG_MAX, NULL);
    case GF_TENSORS: {
        /* names one after another, each with its NUL: at most the text */
        size_t used = 0;
        cap = (size_t)(g->end - g->p) + 1;
        if (!(out->names = malloc(cap))) return dck_oom("canary");
        DCK_TRY(gp_open(g, '['));
        if (gp_empty(g, ']')) return DCK_OK;
        do {
            DCK_TRY(gp_string(g, "a tensor name", out->names + used, cap - used, &len));
            used += len + 1;
            out->ntensors++;
            DCK_TRY(gp_next(g, ']', &more));
        } while (more);
        return DCK_OK;
    }
    case GF_ROOTS: {
        DCK_TRY(gp_open(g, '['));
        if (gp_empty(g, ']')) return DCK_OK;
        do {
            dck_digest d;
            DCK_TRY(gp_digest(g, "a root", &d));
            DCK_TRY(gp_push(&out->roots, nroots, &cap, d));
            DCK_TRY(gp_next(g, ']', &more));
        } while (more);
        return DCK_OK;
    }
    default: { /* GF_DIGESTS: one array per step, every one as long as the first */
        size_t row0 = 0;
        DCK_TRY(gp_open(g, '['));
        if (gp_empty(g, ']')) return DCK_OK;
        do {
            size_t before = *ndg;
            DCK_TRY(gp_open(g, '['));
            if (!gp_empty(g, ']')) {
                bool in = true;
                while (in) {
                    dck_digest d;
                    DCK_TRY(gp_digest(g, "a digest", &d));
                    DCK_TRY(gp_push(&out->digests, ndg, &cap, d));
                    DCK_TRY(gp_next(g, ']', &in));
                }
            }
            size_t n = *ndg - before;
            if (*rows == 0) row0 = n;
            if (n != row0)
                return gp_bad(g, "digests of step %zu: %zu, step 1 has %zu", *rows + 1, n, row0);
            (*rows)++;
            DCK_TRY(gp_next(g, ']', &more));
        } while (more);
        return DCK_OK;
    }
    }
}

dck_status dck_canary_golden_parse(const char *text, size_t len, const char *label,
                                   dck_canary_golden *out) {
    memset(out, 0, sizeof *out);
    gparse g = {(const unsigned char *)text, (const unsigned char *)text, (const unsigned char *)text + len, label};
    size_t nroots = 0, ndg = 0, rows = 0;
    bool seen[GF_COUNT] = {false};
    dck_status s = DCK_OK;
    gp_ws(&g);
    if (g.p == g.end) {
        s = gp_syntax(&g, len ? "only white space" : "empty file");
        goto done;
    }
    if ((s = gp_open(&g, '{'))) goto done;
    bool more = !gp_empty(&g, '}');
    while (more && !s) {
        char key[32];
        if ((s = gp_string(&g, "a field name", key, sizeof key, NULL))) {
            if (s == DCK_ERR_FORMAT && strstr(dck_last_error(), "longer than"))
                s = gp_bad(&g, "unknown field (fields: detcheck_canary, config, steps, tensors, roots, digests)");
            break;
        }
        int f = 0;
        while (f < GF_COUNT && strcmp(key, golden_fields[f])) f++;
        if (f == GF_COUNT) {
            s = gp_bad(&g, "unknown field \"%s\" (fields: detcheck_canary, config, steps, tensors, roots, digests)", key);
            break;
        }
        if (seen[f]) {
            s = gp_bad(&g, "field \"%s\" twice", key);
            break;
        }
        seen[f] = true;
        gp_ws(&g);
        if (g.p >= g.end || *g.p != ':') {
            s = gp_syntax(&g, "expected ':'");
            break;
        }
        g.p++;
        if ((s = golden_field(&g, f, out, &nroots, &ndg, &rows))) break;
        s = gp_next(&g, '}', &more);
    }
    if (s) goto done;
    gp_ws(&g);
    if (g.p != g.end) {
        s = gp_syntax(&g, "more after the object");
        goto done;
    }
    for (int f = 0; f < GF_COUNT; f++)
        if (!seen[f]) {
            s = gp_bad(&g, "no field \"%s\" (fields: detcheck_canary, config, steps, tensors, roots, digests)",
                       golden_fields[f]);
            goto done;
        }
    if (nroots != (size_t)out->steps || rows != (size_t)out->steps) {
        s = gp_bad(&g, "%zu roots and %zu steps of digests, for %ld steps", nroots, rows, out->steps);
        goto done;
    }
    if (out->ntensors == 0 || ndg != (size_t)out->steps * DCK_TAP_RECORDED * out->ntensors) {
        s = gp_bad(&g, "%zu digests per step for %zu tensors (%d per tensor)", rows ? ndg / rows : 0,
                   out->ntensors, DCK_TAP_RECORDED);
        goto done;
    }
done:
    if (s) dck_canary_golden_release(out);
    return s;
}

/* The stored configuration against this run's, naming every field that
 * differs. The token file counts by its content digest ("data"), never by
 * its path ("data_path": ./tok.bin and tok.bin are the same data). */
static dck_status golden_config_match(const char *path, const char *stored, const dck_train_config *c) {
    json_error_t err;
    json_t *old = json_loads(stored, 0, &err), *now = NULL;
    if (!json_is_object(old)) {
        json_decref(old);
        return dck_set_error(DCK_ERR_FORMAT, "%s: not a canary golden file: its config is not a JSON object", path);
    }
    char *mine = NULL;
    dck_status s = dck_train_config_json(c, &mine);
    if (!s && !(now = json_loads(mine, 0, &err))) s = dck_oom("canary");
    free(mine);
    char msg[1024] = "";
    size_t len = 0;
    for (int pass = 0; !s && pass < 2; pass++) { /* this run's fields, then any only the golden has */
        json_t *a = pass ? old : now, *b = pass ? now : old, *v;
        const char *key;
        json_object_foreach(a, key, v) {
            json_t *w = json_object_get(b, key);
            if (!strcmp(key, "data_path") || (w && json_equal(v, w)) || (pass && w)) continue;
            char x[160], y[160];
            json_t *gv = pass ? v : w, *rv = pass ? w : v;
            snprintf(x, sizeof x, "%s", !gv ? "(absent)" : json_is_string(gv) ? json_string_value(gv) : "?");
            snprintf(y, sizeof y, "%s", !rv ? "(absent)" : json_is_string(rv) ? json_string_value(rv) : "?");
            if (json_is_integer(gv)) snprintf(x, sizeof x, "%lld", (long long)json_integer_value(gv));
            if (json_is_integer(rv)) snprintf(y, sizeof y, "%lld", (long long)json_integer_value(rv));
            if (len < sizeof msg - 1)
                len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s%s: golden %s, this run %s",
                                        len ? "; " : "", key, !strcmp(key, "data") ? " (content digest)" : "",
                                        x, y);
        }
    }
    json_decref(old);
    json_decref(now);
    if (!s && len)
        s = dck_set_error(DCK_ERR_MISMATCH, "%s: written for another run configuration (%s)", path, msg);
    return s;
}

dck_status dck_canary_golden_read(const char *path, const dck_train_config *c, const dck_model *m,
                                  dck_canary_golden *out) {
    memset(out, 0, sizeof *out);
    uint64_t limit = dck_canary_golden_limit(c->steps, m->nparams);
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return dck_set_error(DCK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    char *text = NULL;
    dck_status s = DCK_OK;
    if (fstat(fd, &st) != 0) {
        s = dck_set_error(DCK_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: not a canary golden file (not a regular file)", path);
    } else if ((uint64_t)st.st_size > limit) {
        s = dck_set_error(DCK_ERR_LIMIT, "%s: %llu bytes, more than the %llu a golden file of this run "
                          "(%ld steps, %zu tensors) can take: not read (LIMITS in detcheck-canary(1))",
                          path, (unsigned long long)st.st_size, (unsigned long long)limit, c->steps,
                          m->nparams);
    } else if (!(text = malloc((size_t)limit + 1))) {
        s = dck_oom("canary");
    }
    size_t n = 0;
    while (!s) { /* the cap holds even if the file grows while it is read */
        ssize_t r = read(fd, text + n, (size_t)limit + 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) s = dck_set_error(DCK_ERR_IO, "%s: read: %s", path, strerror(errno));
        if (r <= 0) break;
        n += (size_t)r;
        if (n > limit)
            s = dck_set_error(DCK_ERR_LIMIT, "%s: grew past %llu bytes while read", path,
                              (unsigned long long)limit);
    }
    close(fd);
    dck_canary_golden g;
    memset(&g, 0, sizeof g);
    if (!s) s = dck_canary_golden_parse(text, n, path, &g);
    free(text);
    if (s) return s;
    if (g.steps != c->steps) {
        s = dck_set_error(DCK_ERR_MISMATCH, "%s: written for %ld steps, this run has %ld (--steps)", path,
                          g.steps, c->steps);
    } else if (!(s = golden_config_match(path, g.config, c))) {
        const char *name = g.names;
        for (size_t i = 0; !s && i < m->nparams; i++, name += strlen(name) + 1)
            if (i >= g.ntensors || strcmp(name, m->params[i].name))
                s = dck_set_error(DCK_ERR_MISMATCH, "%s: tensor %zu is %s, the model's is %s", path, i + 1,
                                  i < g.ntensors ? name : "(absent)", m->params[i].name);
        if (!s && g.ntensors != m->nparams)
            s = dck_set_error(DCK_ERR_MISMATCH, "%s: %zu tensors, the model has %zu", path, g.ntensors,
                              m->nparams);
    }
    if (!s) {
        *out = g;
        return DCK_OK;
    }
    dck_canary_golden_release(&g);
    return s;
}

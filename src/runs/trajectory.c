/* The one C reader and writer of trajectory.jsonl (trajectory.h), and the
 * comparisons of two trajectories. */
#include "runs/trajectory.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool hex32(const char *s, uint32_t *out) {
    if (!s || strlen(s) != 8) return false;
    char *end;
    unsigned long v = strtoul(s, &end, 16);
    if (*end) return false;
    *out = (uint32_t)v;
    return true;
}

/* One trajectory line (without or with its newline) into r; the message
 * names path:lineno. */
dck_status dck_traj_parse_line(const char *line, size_t len, const char *path, long lineno,
                               dck_traj_rec *r) {
    json_error_t err;
    json_t *o = json_loadb(line, len, 0, &err);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return dck_set_error(DCK_ERR_FORMAT, "%s:%ld: not a JSON object", path, lineno);
    }
    memset(r, 0, sizeof *r);
    json_t *st = json_object_get(o, "step");
    json_t *root = json_object_get(o, "root");
    float lr;
    if (!json_is_integer(st) ||
        !hex32(json_string_value(json_object_get(o, "loss_bits")), &r->loss_bits) ||
        !hex32(json_string_value(json_object_get(o, "grad_norm_bits")), &r->grad_norm_bits) ||
        !(json_is_number(json_object_get(o, "lr")) || json_is_null(json_object_get(o, "lr")))) {
        json_decref(o);
        return dck_set_error(DCK_ERR_FORMAT, "%s:%ld: needs step, loss_bits, grad_norm_bits and lr",
                             path, lineno);
    }
    r->step = (long)json_integer_value(st);
    json_t *jl = json_object_get(o, "lr"), *jt = json_object_get(o, "step_time_s");
    lr = (float)json_number_value(jl); /* null: 0 */
    r->lr_bits = dck_f32_bits(lr);
    r->lr = json_is_number(jl) ? json_number_value(jl) : NAN;
    r->step_time_s = json_is_number(jt) && json_number_value(jt) >= 0 ? json_number_value(jt) : NAN;
    if (root) {
        if (!json_is_string(root) || dck_digest_from_hex(json_string_value(root), &r->root)) {
            json_decref(o);
            return dck_set_error(DCK_ERR_FORMAT, "%s:%ld: bad root digest", path, lineno);
        }
        r->has_root = true;
    }
    json_decref(o);
    return DCK_OK;
}

/* A trajectory line is about 200 bytes (the trainer's and the Recorder's);
 * a longer one is not a record, and reading it must not take memory
 * without bound (a 1.5 GiB file of one line) */
enum { TRAJ_MAX_LINE = 1 << 16, TRAJ_CHUNK = 1 << 16 };

/* One line read whole (complete: it ended with a newline): parsed and
 * appended. A torn last line of a killed run is ignored. */
static dck_status traj_take(const char *path, const char *line, size_t len, bool complete, long lineno,
                            dck_traj_rec **v, size_t *cnt, size_t *cap) {
    dck_traj_rec r;
    dck_status s = dck_traj_parse_line(line, len, path, lineno, &r);
    if (s) {
        if (complete) return s;
        dck_clear_error();
        return DCK_OK;
    }
    if (*cnt && r.step <= (*v)[*cnt - 1].step)
        return dck_set_error(DCK_ERR_FORMAT, "%s:%ld: step %ld does not follow step %ld", path, lineno, r.step,
                             (*v)[*cnt - 1].step);
    if (dck_grow((void **)v, cap, *cnt + 1, sizeof **v)) return dck_oom(path);
    (*v)[(*cnt)++] = r;
    return DCK_OK;
}

/* Streams the file in chunks, never past the size it had when opened (a
 * live run appends): records are at most one per line, so their memory is
 * bounded by the file's size, and a line by TRAJ_MAX_LINE. Opened with
 * dck_open_regular: a FIFO would block, /dev/zero never end. */
dck_status dck_traj_load(const char *path, dck_traj_rec **recs, size_t *n) {
    *recs = NULL;
    *n = 0;
    int fd = -1;
    struct stat st;
    DCK_TRY(dck_open_regular(path, &fd, &st));
    uint64_t left = (uint64_t)st.st_size;
    char *line = malloc(TRAJ_MAX_LINE), *chunk = malloc(TRAJ_CHUNK);
    dck_traj_rec *v = NULL;
    size_t cnt = 0, cap = 0, len = 0, at = 0, have = 0;
    long lineno = 0;
    dck_status s = line && chunk ? DCK_OK : dck_oom(path);
    while (!s) {
        if (at == have) {
            if (!left) break;
            ssize_t got = read(fd, chunk, left < TRAJ_CHUNK ? (size_t)left : TRAJ_CHUNK);
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) {
                s = dck_set_error(DCK_ERR_IO, "%s:%ld: cannot read: %s", path, lineno + 1, strerror(errno));
                break;
            }
            if (got == 0) break; /* shrank while read */
            left -= (uint64_t)got;
            at = 0;
            have = (size_t)got;
        }
        const char *nl = memchr(chunk + at, '\n', have - at);
        size_t k = nl ? (size_t)(nl - (chunk + at)) + 1 : have - at;
        if (len + k > TRAJ_MAX_LINE) {
            s = dck_set_error(DCK_ERR_LIMIT, "%s:%ld: line longer than %d bytes: not a trajectory record", path,
                              lineno + 1, TRAJ_MAX_LINE);
            break;
        }
        memcpy(line + len, chunk + at, k);
        len += k;
        at += k;
        if (nl) {
            s = traj_take(path, line, len, true, ++lineno, &v, &cnt, &cap);
            len = 0;
        }
    }
    if (!s && len) s = traj_take(path, line, len, false, ++lineno, &v, &cnt, &cap);
    free(line);
    free(chunk);
    close(fd);
    if (s) {
        free(v);
        return s;
    }
    *recs = v;
    *n = cnt;
    return DCK_OK;
}

/* A JSON number, or null for NaN and infinities (the bits say which). */
static const char *json_float(float v, char *buf, size_t n) {
    if (!isfinite(v)) return "null";
    return dck_float_text(v, buf, n);
}

dck_status dck_traj_append(FILE *f, const char *path, const dck_traj_rec *r) {
    char l[32], g[32], lr[32];
    /* shortest decimals that read back as the same floats; bits alongside */
    fprintf(f,
            "{\"step\":%ld,\"loss\":%s,\"loss_bits\":\"%08x\",\"grad_norm\":%s,"
            "\"grad_norm_bits\":\"%08x\",\"lr\":%s",
            r->step, json_float(dck_f32_from_bits(r->loss_bits), l, sizeof l), r->loss_bits,
            json_float(dck_f32_from_bits(r->grad_norm_bits), g, sizeof g), r->grad_norm_bits,
            json_float(dck_f32_from_bits(r->lr_bits), lr, sizeof lr));
    if (r->has_root) {
        char hex[33];
        dck_digest_to_hex(r->root, hex);
        fprintf(f, ",\"root\":\"%s\"", hex);
    }
    fputs("}\n", f);
    /* a full disk must stop the run, not thin its record out */
    if (fflush(f) != 0 || ferror(f)) return dck_set_error(DCK_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return DCK_OK;
}

dck_traj_rec dck_traj_as_read(const dck_traj_rec *w) {
    dck_traj_rec r = *w;
    float lr = dck_f32_from_bits(w->lr_bits);
    char text[32];
    /* its decimal through strtod, as a JSON reader takes it; null is 0 */
    double v = isfinite(lr) ? strtod(dck_float_text(lr, text, sizeof text), NULL) : 0;
    r.lr_bits = dck_f32_bits((float)v);
    r.lr = isfinite(lr) ? v : NAN;
    r.step_time_s = NAN;
    return r;
}

int dck_traj_compare(const dck_traj_rec *a, size_t na, const dck_traj_rec *b, size_t nb,
                     long *step, char *what, size_t wlen) {
    size_t i = 0, j = 0;
    if (what && wlen) what[0] = 0;
    while (i < na && j < nb) {
        if (a[i].step < b[j].step) {
            i++;
            continue;
        }
        if (b[j].step < a[i].step) {
            j++;
            continue;
        }
        const dck_traj_rec *x = &a[i], *y = &b[j];
        char buf[512] = "";
        size_t n = 0;
#define FIELD(cond, fmt, ...)                                                                    \
    if (cond && n < sizeof buf)                                                                  \
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s" fmt, n ? "; " : "", __VA_ARGS__);
        FIELD(x->loss_bits != y->loss_bits, "loss_bits %08x vs %08x", x->loss_bits, y->loss_bits)
        FIELD(x->grad_norm_bits != y->grad_norm_bits, "grad_norm_bits %08x vs %08x",
              x->grad_norm_bits, y->grad_norm_bits)
        FIELD(x->lr_bits != y->lr_bits, "lr %.9g vs %.9g", (double)dck_f32_from_bits(x->lr_bits),
              (double)dck_f32_from_bits(y->lr_bits))
        if (x->has_root && y->has_root && !dck_digest_equal(x->root, y->root)) {
            char h1[33], h2[33];
            dck_digest_to_hex(x->root, h1);
            dck_digest_to_hex(y->root, h2);
            FIELD(1, "root %s vs %s", h1, h2)
        }
#undef FIELD
        if (n) {
            *step = x->step;
            if (what && wlen) snprintf(what, wlen, "%s", buf);
            return 1;
        }
        i++;
        j++;
    }
    return 0;
}

long dck_traj_first_missing(const dck_traj_rec *t, size_t n, long lo, long hi) {
    long want = lo;
    for (size_t i = 0; i < n && want <= hi; i++) {
        if (t[i].step < want) continue;
        if (t[i].step != want) return want;
        want++;
    }
    return want <= hi ? want : -1;
}

long dck_traj_root_unmatched(const dck_traj_rec *a, size_t na, const dck_traj_rec *b, size_t nb, long lo, long hi,
                             bool *in_a) {
    for (size_t i = 0, j = 0; i < na && j < nb;) {
        if (a[i].step != b[j].step) {
            if (a[i].step < b[j].step) i++;
            else j++;
            continue;
        }
        if (a[i].step >= lo && a[i].step <= hi && a[i].has_root != b[j].has_root) {
            *in_a = a[i].has_root;
            return a[i].step;
        }
        i++, j++;
    }
    return -1;
}

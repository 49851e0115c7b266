/* Run directories of the training loop: the trajectory log and the
 * clearing of a step directory for a new checkpoint (reading the
 * checkpoints of a run: runs/checkpoints.c). */
#include "train/train.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
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

/* ------------------------------------------------------------------ clearing a step directory
 *
 * A step directory is cleared before its checkpoint is (re)written: a torn
 * one of a killed run, or one being replaced. Only what detcheck itself
 * writes there may go, so the names are a table, and nothing is followed:
 * the directory is opened with O_NOFOLLOW and every entry is examined and
 * removed relative to its descriptor (fstatat AT_SYMLINK_NOFOLLOW, unlinkat),
 * so a symbolic link planted as step_NNNNNNNN, or swapped in for one of its
 * files, never leads a deletion elsewhere. A directory that is a link, or
 * that holds anything else, is refused before anything is deleted. */

typedef enum { OWN_EXACT, OWN_SHARD } own_kind;
static const struct {
    own_kind kind;
    const char *name;
} own_names[] = {
    {OWN_EXACT, DCK_CKPT_MARKER},
    {OWN_EXACT, DCK_CKPT_MANIFEST},
    {OWN_EXACT, DCK_CKPT_MANIFEST ".partial"}, /* --kill-during-ckpt */
    {OWN_SHARD, ".safetensors"},               /* rank_NNNNN_of_NNNNN.safetensors */
    {OWN_SHARD, ".safetensors.zst"},
};

static bool digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return false;
    return true;
}

/* NAME, or NAME.tmp.XXXXXX (a temporary of an interrupted atomic write:
 * mkstemp's six letters and digits), for NAME in the table. */
bool dck_ckpt_own_name(const char *nm) {
    size_t n = strlen(nm);
    static const char tmp[] = ".tmp.";
    const size_t tl = sizeof tmp - 1;
    if (n > tl + 6 && !memcmp(nm + n - 6 - tl, tmp, tl)) {
        bool alnum = true;
        for (size_t i = n - 6; i < n; i++)
            alnum = alnum && ((nm[i] >= '0' && nm[i] <= '9') || (nm[i] >= 'a' && nm[i] <= 'z') ||
                              (nm[i] >= 'A' && nm[i] <= 'Z'));
        if (alnum) n -= 6 + tl;
    }
    for (size_t i = 0; i < sizeof own_names / sizeof own_names[0]; i++) {
        const char *w = own_names[i].name;
        size_t wl = strlen(w);
        if (own_names[i].kind == OWN_EXACT) {
            if (n == wl && !memcmp(nm, w, n)) return true;
            continue;
        }
        /* rank_%05d_of_%05d then the suffix */
        if (n == 19 + wl && !memcmp(nm, "rank_", 5) && digits(nm + 5, 5) &&
            !memcmp(nm + 10, "_of_", 4) && digits(nm + 14, 5) && !memcmp(nm + 19, w, wl))
            return true;
    }
    return false;
}

dck_status dck_ckpt_prepare_dir(const char *out, long step) {
    char name[32];
    snprintf(name, sizeof name, "step_%08ld", step);
    char *dir = dck_path_join(out, name);
    if (!dir) return dck_oom(NULL);
    dck_status s = DCK_OK;
    int ofd = -1, dfd = -1;
    DIR *d = NULL;
    /* --out itself may be a link the user chose; its step folders may not */
    if ((ofd = open(out, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
        s = dck_set_error(DCK_ERR_IO, "%s: %s", out, strerror(errno));
        goto done;
    }
    if (mkdirat(ofd, name, 0777) != 0 && errno != EEXIST) {
        s = dck_set_error(DCK_ERR_IO, "%s: cannot create directory: %s", dir, strerror(errno));
        goto done;
    }
    if ((dfd = openat(ofd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0) {
        struct stat st;
        if ((errno == ELOOP || errno == ENOTDIR) && fstatat(ofd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
            s = dck_set_error(DCK_ERR_INVALID,
                              "%s: is %s, not a checkpoint directory detcheck wrote; refusing to "
                              "write into it or clear it (move it away)",
                              dir, S_ISLNK(st.st_mode) ? "a symbolic link" : "not a directory");
        else
            s = dck_set_error(DCK_ERR_IO, "%s: %s", dir, strerror(errno));
        goto done;
    }
    int lfd = dup(dfd);
    if (lfd < 0 || !(d = fdopendir(lfd))) {
        if (lfd >= 0) close(lfd);
        s = dck_set_error(DCK_ERR_IO, "%s: %s", dir, strerror(errno));
        goto done;
    }
    /* first every entry is checked, then anything is deleted */
    struct dirent *e;
    size_t ours = 0;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (!strcmp(nm, ".") || !strcmp(nm, "..")) continue;
        struct stat st;
        if (fstatat(dfd, nm, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno == ENOENT) continue;
            s = dck_set_error(DCK_ERR_IO, "%s/%s: %s", dir, nm, strerror(errno));
            goto done;
        }
        if (!dck_ckpt_own_name(nm) || !(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) {
            s = dck_set_error(DCK_ERR_INVALID,
                              "%s: holds %s, which detcheck did not write; refusing to clear it "
                              "(move it away, or choose another --out)",
                              dir, nm);
            goto done;
        }
        ours++;
    }
    if (ours) {
        /* the marker first: a crash in between never leaves it complete */
        if (unlinkat(dfd, DCK_CKPT_MARKER, 0) != 0 && errno != ENOENT) {
            s = dck_set_error(DCK_ERR_IO, "%s/%s: cannot remove: %s", dir, DCK_CKPT_MARKER,
                              strerror(errno));
            goto done;
        }
        rewinddir(d);
        while ((e = readdir(d))) {
            const char *nm = e->d_name;
            if (!strcmp(nm, ".") || !strcmp(nm, "..") || !dck_ckpt_own_name(nm)) continue;
            /* a link (named as ours) goes itself: unlinkat never follows */
            if (unlinkat(dfd, nm, 0) != 0 && errno != ENOENT) {
                s = dck_set_error(DCK_ERR_IO, "%s/%s: cannot remove: %s", dir, nm, strerror(errno));
                goto done;
            }
        }
    }
done:
    if (d) closedir(d);
    if (dfd >= 0) close(dfd);
    if (ofd >= 0) close(ofd);
    free(dir);
    return s;
}

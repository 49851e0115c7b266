/* Run directories of the training loop: complete checkpoints, shard lists
 * and the trajectory log. A checkpoint directory step_NNNNNNNN is complete
 * only when its manifest and then its COMPLETE marker are in place (both
 * written last, through temporary names, fsync and rename); anything else
 * is torn: a crash while it was written. */
#include "train/train.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *dck_ckpt_dir(const char *out, long step) {
    char name[32];
    snprintf(name, sizeof name, "step_%08ld", step);
    return dck_path_join(out, name);
}

void dck_free_strings(char **v, size_t n) {
    if (!v) return;
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

static int cmp_long(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? -1 : x > y;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_file(const char *dir, const char *name) {
    char *p = dck_path_join(dir, name);
    struct stat st;
    bool ok = p && stat(p, &st) == 0 && S_ISREG(st.st_mode);
    free(p);
    return ok;
}

dck_status dck_ckpt_list(const char *out, long **steps, size_t *n, dck_warn_fn warn, void *ctx) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(out);
    if (!d) {
        if (errno == ENOENT) return DCK_OK;
        return dck_set_error(DCK_ERR_IO, "%s: %s", out, strerror(errno));
    }
    long *v = NULL;
    size_t cnt = 0, cap = 0;
    dck_status s = DCK_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (strncmp(nm, "step_", 5) != 0 || strlen(nm) != 13) continue;
        char *end;
        long st = strtol(nm + 5, &end, 10);
        if (*end || st < 0) continue;
        char *dir = dck_path_join(out, nm);
        if (!dir) {
            s = dck_oom(NULL);
            break;
        }
        bool marker = is_file(dir, DCK_CKPT_MARKER), manifest = is_file(dir, DCK_CKPT_MANIFEST);
        if (marker && manifest) {
            if ((s = dck_grow((void **)&v, &cap, cnt + 1, sizeof *v))) {
                free(dir);
                break;
            }
            v[cnt++] = st;
        } else if (warn) {
            char msg[DCK_TRAIN_PATH + 160];
            snprintf(msg, sizeof msg, "%s: torn checkpoint (no %s), skipped", dir,
                     marker ? DCK_CKPT_MANIFEST : DCK_CKPT_MARKER);
            warn(ctx, msg);
        }
        free(dir);
    }
    closedir(d);
    if (s) {
        free(v);
        return s;
    }
    if (cnt) qsort(v, cnt, sizeof *v, cmp_long);
    *steps = v;
    *n = cnt;
    return DCK_OK;
}

dck_status dck_ckpt_shards(const char *dir, char ***paths, size_t *n) {
    *paths = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return dck_set_error(DCK_ERR_IO, "%s: %s", dir, strerror(errno));
    char **v = NULL;
    size_t cnt = 0, cap = 0;
    dck_status s = DCK_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *nm = e->d_name;
        if (strncmp(nm, "rank_", 5) != 0) continue;
        if (!dck_has_suffix(nm, ".safetensors") && !dck_has_suffix(nm, ".safetensors.zst"))
            continue;
        if ((s = dck_grow((void **)&v, &cap, cnt + 1, sizeof *v))) break;
        if (!(v[cnt] = dck_path_join(dir, nm))) {
            s = dck_oom(NULL);
            break;
        }
        cnt++;
    }
    closedir(d);
    if (!s && cnt == 0) s = dck_set_error(DCK_ERR_FORMAT, "%s: no shard files (rank_*.safetensors)", dir);
    if (s) {
        dck_free_strings(v, cnt);
        return s;
    }
    qsort(v, cnt, sizeof *v, cmp_name);
    *paths = v;
    *n = cnt;
    return DCK_OK;
}

static bool hex32(const char *s, uint32_t *out) {
    if (!s || strlen(s) != 8) return false;
    char *end;
    unsigned long v = strtoul(s, &end, 16);
    if (*end) return false;
    *out = (uint32_t)v;
    return true;
}

dck_status dck_traj_load(const char *path, dck_traj_rec **recs, size_t *n) {
    *recs = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return dck_set_error(DCK_ERR_IO, "%s: %s", path, strerror(errno));
    dck_traj_rec *v = NULL;
    size_t cnt = 0, cap = 0;
    dck_status s = DCK_OK;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    long lineno = 0;
    while ((len = getline(&line, &lcap, f)) > 0) {
        lineno++;
        bool complete = line[len - 1] == '\n';
        json_error_t err;
        json_t *o = json_loadb(line, (size_t)len, 0, &err);
        if (!o || !json_is_object(o)) {
            json_decref(o);
            if (!complete) break; /* torn last line of a killed run */
            s = dck_set_error(DCK_ERR_FORMAT, "%s:%ld: not a JSON object", path, lineno);
            break;
        }
        dck_traj_rec r;
        memset(&r, 0, sizeof r);
        json_t *st = json_object_get(o, "step");
        json_t *root = json_object_get(o, "root");
        float lr;
        if (!json_is_integer(st) ||
            !hex32(json_string_value(json_object_get(o, "loss_bits")), &r.loss_bits) ||
            !hex32(json_string_value(json_object_get(o, "grad_norm_bits")), &r.grad_norm_bits) ||
            !(json_is_number(json_object_get(o, "lr")) || json_is_null(json_object_get(o, "lr")))) {
            json_decref(o);
            s = dck_set_error(DCK_ERR_FORMAT,
                              "%s:%ld: needs step, loss_bits, grad_norm_bits and lr", path, lineno);
            break;
        }
        r.step = (long)json_integer_value(st);
        lr = (float)json_number_value(json_object_get(o, "lr")); /* null: 0 */
        r.lr_bits = dck_f32_bits(lr);
        if (root) {
            if (!json_is_string(root) || dck_digest_from_hex(json_string_value(root), &r.root)) {
                json_decref(o);
                s = dck_set_error(DCK_ERR_FORMAT, "%s:%ld: bad root digest", path, lineno);
                break;
            }
            r.has_root = true;
        }
        json_decref(o);
        if (cnt && r.step <= v[cnt - 1].step) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s:%ld: step %ld does not follow step %ld", path,
                              lineno, r.step, v[cnt - 1].step);
            break;
        }
        if ((s = dck_grow((void **)&v, &cap, cnt + 1, sizeof *v))) break;
        v[cnt++] = r;
    }
    free(line);
    fclose(f);
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

/* The checkpoints of a run directory, as the trainer writes them
 * (step_NNNNNNNN/: rank shards, manifest.json, COMPLETE): which are
 * complete, their directories, manifests and shard files. A checkpoint
 * directory is complete only when its manifest and then its COMPLETE
 * marker are in place (both written last, through temporary names, fsync
 * and rename); anything else is torn: a crash while it was written. */
#include "runs/checkpoints.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

char *dck_ckpt_dir(const char *out, long step) {
    char name[32];
    snprintf(name, sizeof name, "step_%08ld", step);
    return dck_path_join(out, name);
}

dck_status dck_ckpt_manifest_load(const char *out, long step, dck_manifest **m) {
    char *d = dck_ckpt_dir(out, step);
    char *p = d ? dck_path_join(d, DCK_CKPT_MANIFEST) : NULL;
    dck_status s = p ? dck_manifest_load(p, m) : dck_oom(NULL);
    free(d);
    free(p);
    return s;
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
            char msg[PATH_MAX + 160];
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

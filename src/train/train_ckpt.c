/* Run directories of the training loop: complete checkpoints and shard
 * lists (the trajectory log is runs/trajectory.c's). A checkpoint
 * directory step_NNNNNNNN is complete only when its manifest and then its
 * COMPLETE marker are in place (both written last, through temporary
 * names, fsync and rename); anything else is torn: a crash while it was
 * written. */
#include "train/train.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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

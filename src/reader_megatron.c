/* Megatron-LM checkpoint trees.
 *
 *   ROOT/latest_checkpointed_iteration.txt   "1000" or "release"
 *   ROOT/iter_0001000/                        (or ROOT/release/)
 *       mp_rank_00/model_optim_rng.pt         legacy: one dir per TP rank
 *       mp_rank_00_001/model_optim_rng.pt     legacy: TP rank 00, PP rank 001
 *       mp_rank_00/distrib_optim.pt           distributed optimizer state
 *     or, the torch_dist layout:
 *       .metadata, __R_N.distcp               a DCP checkpoint
 *       metadata.json, common.pt              backend info, unsharded state
 *
 * Given the root, the iteration named in latest_checkpointed_iteration.txt
 * is read (or options.iteration when >= 0); an iter_N directory can also be
 * given directly. Legacy rank directories are not merged: their tensors are
 * named RANKDIR.path (mp_rank_01.model.language_model...), and other .pt
 * files of a rank directory RANKDIR.STEM.path (mp_rank_00.distrib_optim...). */
#include "readers.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

dck_status dck_dcp_load_dir(dck_checkpoint *ck, const char *dir, const char *relroot);

#define LATEST "latest_checkpointed_iteration.txt"

static bool exists(const char *dir, const char *name, bool want_dir) {
    char *p = dck_path_join(dir, name);
    struct stat st;
    bool ok = p && stat(p, &st) == 0 && (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
    free(p);
    return ok;
}

static bool is_rank_dir(const char *name) {
    if (strncmp(name, "mp_rank_", 8)) return false;
    const char *s = name + 8;
    if (!isdigit((unsigned char)*s)) return false;
    while (isdigit((unsigned char)*s)) s++;
    if (*s == '_') {
        s++;
        if (!isdigit((unsigned char)*s)) return false;
        while (isdigit((unsigned char)*s)) s++;
    }
    return *s == 0;
}

static const char *base_of(const char *p) {
    size_t l = strlen(p);
    while (l > 1 && p[l - 1] == '/') l--;
    const char *b = p + l;
    while (b > p && b[-1] != '/') b--;
    return b;
}

static bool is_iter_dir(const char *path) {
    if (exists(path, "common.pt", false) || exists(path, "metadata.json", false)) return true;
    DIR *d = opendir(path);
    if (!d) return false;
    struct dirent *e;
    bool found = false;
    while ((e = readdir(d)) && !found) found = is_rank_dir(e->d_name);
    closedir(d);
    return found;
}

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static dck_status list_dir(const char *path, char ***out, size_t *n) {
    DIR *d = opendir(path);
    *out = NULL;
    *n = 0;
    if (!d) return dck_set_error(DCK_ERR_IO, "%s: cannot open directory: %s", path, strerror(errno));
    size_t cap = 0;
    dck_status s = DCK_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if ((s = dck_grow((void **)out, &cap, *n + 1, sizeof **out))) break;
        if (!((*out)[*n] = dck_strdup(e->d_name))) {
            s = dck_set_error(DCK_ERR_NOMEM, "out of memory");
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (!s) qsort(*out, *n, sizeof **out, cmp_name);
    return s;
}

static void free_list(char **v, size_t n) {
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

static char *rel_join(const char *a, const char *b) {
    if (!a || !*a) return dck_strdup(b);
    return dck_path_join(a, b);
}

static dck_status add_plain_file(dck_checkpoint *ck, const char *path, const char *rel) {
    dck_file *f;
    dck_status s = dck_file_open(path, rel, &f);
    if (s) return s;
    uint32_t idx;
    return dck_ck_add_file(ck, f, &idx);
}

static dck_status load_rank_dir(dck_checkpoint *ck, const char *dir, const char *rel, const char *rank) {
    char **names;
    size_t n;
    dck_status s = list_dir(dir, &names, &n);
    if (s) return s;
    size_t loaded = 0;
    for (size_t i = 0; i < n && !s; i++) {
        const char *nm = names[i];
        size_t l = strlen(nm);
        size_t stem = l;
        if (stem > 4 && !strcmp(nm + stem - 4, ".zst")) stem -= 4;
        if (stem > 3 && !strncmp(nm + stem - 3, ".pt", 3)) stem -= 3;
        else continue;
        char *p = dck_path_join(dir, nm), *r = rel_join(rel, nm);
        char *prefix = malloc(strlen(rank) + stem + 2);
        if (!p || !r || !prefix) s = dck_set_error(DCK_ERR_NOMEM, "out of memory");
        else {
            if (stem == strlen("model_optim_rng") && !strncmp(nm, "model_optim_rng", stem))
                snprintf(prefix, strlen(rank) + stem + 2, "%s", rank);
            else
                snprintf(prefix, strlen(rank) + stem + 2, "%s.%.*s", rank, (int)stem, nm);
            dck_pt_opts o = {prefix, NULL, NULL, NULL, 0, true};
            s = dck_pt_open_path(ck, p, r, &o);
            loaded++;
        }
        free(p);
        free(r);
        free(prefix);
    }
    free_list(names, n);
    if (!s && !loaded) s = dck_set_error(DCK_ERR_FORMAT, "%s: rank directory without .pt files", dir);
    return s;
}

static dck_status load_iter_dir(dck_checkpoint *ck, const char *dir, const char *rel) {
    dck_status s = DCK_OK;
    if (exists(dir, ".metadata", false) || exists(dir, ".metadata.zst", false)) { /* torch_dist */
        if ((s = dck_dcp_load_dir(ck, dir, rel))) return s;
        const char *extra[] = {"common.pt", "common.pt.zst"};
        for (int i = 0; i < 2 && !s; i++)
            if (exists(dir, extra[i], false)) {
                char *p = dck_path_join(dir, extra[i]), *r = rel_join(rel, extra[i]);
                dck_pt_opts o = {"", NULL, NULL, NULL, 0, true};
                s = p && r ? dck_pt_open_path(ck, p, r, &o) : dck_set_error(DCK_ERR_NOMEM, "out of memory");
                free(p);
                free(r);
            }
        if (!s && exists(dir, "metadata.json", false)) {
            char *p = dck_path_join(dir, "metadata.json"), *r = rel_join(rel, "metadata.json");
            s = p && r ? add_plain_file(ck, p, r) : dck_set_error(DCK_ERR_NOMEM, "out of memory");
            free(p);
            free(r);
        }
        return s;
    }
    char **names;
    size_t n;
    if ((s = list_dir(dir, &names, &n))) return s;
    size_t ranks = 0;
    for (size_t i = 0; i < n && !s; i++) {
        if (!is_rank_dir(names[i]) || !exists(dir, names[i], true)) continue;
        char *p = dck_path_join(dir, names[i]), *r = rel_join(rel, names[i]);
        s = p && r ? load_rank_dir(ck, p, r, names[i]) : dck_set_error(DCK_ERR_NOMEM, "out of memory");
        free(p);
        free(r);
        ranks++;
    }
    free_list(names, n);
    if (!s && !ranks)
        s = dck_set_error(DCK_ERR_FORMAT, "%s: Megatron iteration directory without mp_rank_* directories or .metadata", dir);
    return s;
}

static dck_status read_latest(const char *root, char *buf, size_t n) {
    char *p = dck_path_join(root, LATEST);
    if (!p) return dck_set_error(DCK_ERR_NOMEM, "out of memory");
    FILE *f = fopen(p, "r");
    if (!f) {
        dck_status s = dck_set_error(DCK_ERR_IO, "%s: cannot open: %s", p, strerror(errno));
        free(p);
        return s;
    }
    size_t got = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[got] = 0;
    while (got && isspace((unsigned char)buf[got - 1])) buf[--got] = 0;
    size_t lead = strspn(buf, " \t\r\n");
    memmove(buf, buf + lead, strlen(buf + lead) + 1);
    bool digits = *buf != 0;
    for (const char *c = buf; *c; c++) digits &= isdigit((unsigned char)*c) != 0;
    if (!digits && strcmp(buf, "release")) {
        dck_status s = dck_set_error(DCK_ERR_FORMAT, "%s: neither an iteration number nor 'release'", p);
        free(p);
        return s;
    }
    free(p);
    return DCK_OK;
}

static int mg_probe(const char *path, bool is_dir, const uint8_t *head, size_t n) {
    (void)head;
    (void)n;
    if (!is_dir) return 0;
    if (exists(path, LATEST, false)) return 1;
    const char *b = base_of(path);
    if ((!strncmp(b, "iter_", 5) && isdigit((unsigned char)b[5])) || !strncmp(b, "release", 7)) return is_iter_dir(path);
    return 0;
}

static dck_status mg_open(dck_checkpoint *ck, const char *path, const char *relroot) {
    if (!exists(path, LATEST, false)) return load_iter_dir(ck, path, relroot);
    char it[64], dirname[80];
    if (ck->opt.iteration >= 0) {
        snprintf(dirname, sizeof dirname, "iter_%07ld", ck->opt.iteration);
    } else {
        dck_status s = read_latest(path, it, sizeof it);
        if (s) return s;
        if (!strcmp(it, "release")) snprintf(dirname, sizeof dirname, "release");
        else snprintf(dirname, sizeof dirname, "iter_%07lld", strtoll(it, NULL, 10));
    }
    if (!exists(path, dirname, true))
        return dck_set_error(DCK_ERR_IO, "%s: no directory %s for the iteration asked for", path, dirname);
    char *p = dck_path_join(path, dirname), *r = rel_join(relroot, dirname);
    dck_status s;
    if (!p || !r) s = dck_set_error(DCK_ERR_NOMEM, "out of memory");
    else if (!(s = load_iter_dir(ck, p, r))) {
        /* which iteration was read matters for resume: record it */
        const char *num = dirname + 5;
        if (!strncmp(dirname, "iter_", 5)) {
            while (*num == '0' && num[1]) num++;
            s = dck_ck_add_value(ck, "megatron.iteration", num);
        } else
            s = dck_ck_add_value(ck, "megatron.iteration", "release");
    }
    free(p);
    free(r);
    return s;
}

const dck_reader dck_reader_megatron = {"megatron", mg_probe, mg_open};

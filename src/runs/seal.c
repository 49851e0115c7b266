/* Sealed checkpoints (man detcheck-seal(1)): where a checkpoint's seal lives,
 * its metadata, the one writer (the output rule of manifests, replacing only
 * an earlier seal), the loader that refuses links, FIFOs and manifests that
 * are no seal, and the check of a checkpoint's files against its seal, with
 * the files that hold each difference. */
#include "runs/seal.h"
#include "runs/latest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SEAL_VERSION "1"

/* The last component of ckpt, trailing '/' left out: start and length. */
static const char *base_of(const char *ckpt, size_t *len) {
    size_t n = strlen(ckpt);
    while (n > 1 && ckpt[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && ckpt[b - 1] != '/') b--;
    *len = n - b;
    return ckpt + b;
}

int dck_seal_name_step(const char *ckpt, long long *step) {
    size_t n;
    const char *b = base_of(ckpt, &n);
    char name[4096];
    if (n >= sizeof name) return 0;
    memcpy(name, b, n);
    name[n] = 0;
    return dck_latest_step(name, step); /* one table of layouts (latest_step.c) */
}

dck_status dck_seal_path(const char *ckpt, char **out) {
    *out = NULL;
    struct stat st;
    if (!ckpt || !*ckpt) return dck_set_error(DCK_ERR_INVALID, "seal: no checkpoint path given");
    if (stat(ckpt, &st) != 0)
        return dck_set_error(DCK_ERR_IO, "%s: no such checkpoint (%s)", ckpt, strerror(errno));
    size_t n = strlen(ckpt);
    bool dir = S_ISDIR(st.st_mode);
    while (dir && n > 1 && ckpt[n - 1] == '/') n--;
    size_t len = n + sizeof DCK_SEAL_SUFFIX + 1;
    char *p = malloc(len);
    if (!p) return dck_oom(NULL);
    snprintf(p, len, "%.*s%s", (int)n, ckpt, dir ? "/" DCK_SEAL_NAME : DCK_SEAL_SUFFIX);
    *out = p;
    return DCK_OK;
}

dck_status dck_seal_mark(dck_manifest *m, const char *ckpt, const char *from, long long step, int world_size) {
    if (!m || !ckpt) return dck_set_error(DCK_ERR_INVALID, "dck_seal_mark: no manifest or checkpoint");
    if (!from || (strcmp(from, "memory") && strcmp(from, "files")))
        return dck_set_error(DCK_ERR_INVALID, "dck_seal_mark: seal_from is 'memory' or 'files', not '%s'",
                             from ? from : "(null)");
    if (world_size < 0) return dck_set_error(DCK_ERR_INVALID, "dck_seal_mark: world size %d", world_size);
    size_t n;
    const char *b = base_of(ckpt, &n);
    char name[4096], num[32];
    snprintf(name, sizeof name, "%.*s", (int)n, b);
    DCK_TRY(dck_manifest_set_meta(m, "source", ckpt));
    DCK_TRY(dck_manifest_set_meta(m, "seal", SEAL_VERSION));
    DCK_TRY(dck_manifest_set_meta(m, "seal_from", from));
    DCK_TRY(dck_manifest_set_meta(m, "seal_checkpoint", name));
    if (step >= 0) {
        snprintf(num, sizeof num, "%lld", step);
        DCK_TRY(dck_manifest_set_meta(m, "seal_step", num));
    }
    if (world_size > 0) {
        snprintf(num, sizeof num, "%d", world_size);
        DCK_TRY(dck_manifest_set_meta(m, "seal_world_size", num));
    }
    return DCK_OK;
}

dck_status dck_seal_load(const char *seal_path, dck_manifest **out) {
    *out = NULL;
    struct stat st;
    /* lstat, and no open for reading of anything but a regular file: a FIFO
     * would wait for a writer, a link could name any file */
    if (lstat(seal_path, &st) != 0)
        return dck_set_error(DCK_ERR_IO, "%s: cannot read the seal: %s", seal_path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return dck_set_error(DCK_ERR_INVALID, "%s is %s, not a regular file; refusing it as a seal", seal_path,
                             dck_file_type_name(st.st_mode));
    dck_manifest *m;
    DCK_TRY(dck_manifest_load(seal_path, &m));
    const char *v = dck_manifest_get_meta(m, "seal");
    dck_status s = DCK_OK;
    if (!v) s = dck_set_error(DCK_ERR_FORMAT, "%s: not a detcheck seal (a manifest without seal: 1)", seal_path);
    else if (strcmp(v, SEAL_VERSION))
        s = dck_set_error(DCK_ERR_UNSUPPORTED, "%s: seal format version '%s' (this detcheck reads %s)", seal_path, v,
                          SEAL_VERSION);
    if (s) {
        dck_manifest_free(m);
        return s;
    }
    *out = m;
    return DCK_OK;
}

bool dck_seal_is_file(const char *path) {
    dck_manifest *m = NULL;
    bool yes = dck_seal_load(path, &m) == DCK_OK;
    dck_manifest_free(m);
    dck_clear_error();
    return yes;
}

dck_status dck_seal_save(const dck_manifest *m, const char *ckpt) {
    const char *v = m ? dck_manifest_get_meta(m, "seal") : NULL;
    if (!v || strcmp(v, SEAL_VERSION))
        return dck_set_error(DCK_ERR_INVALID, "%s: the manifest is not marked as a seal (dck_seal_mark)", ckpt);
    char *path;
    DCK_TRY(dck_seal_path(ckpt, &path));
    dck_status s = dck_seal_output_check(path);
    if (!s) s = dck_manifest_save_kind(m, DCK_FORMAT_YAML, path, "detcheck seal", dck_seal_is_file);
    free(path);
    return s;
}

dck_status dck_seal_output_check(const char *seal_path) {
    struct stat st;
    /* the output rule lets an empty file be replaced; a seal replaces only
     * an earlier seal (detcheck-seal(1)) */
    if (lstat(seal_path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
        return dck_set_error(DCK_ERR_INVALID, "%s exists and is not a detcheck seal (an empty file); refusing to "
                                              "overwrite it", seal_path);
    return dck_output_check(NULL, seal_path, "detcheck seal", dck_seal_is_file, NULL, 0);
}

dck_status dck_seal_check_step(const char *ckpt, const char *seal_path, const dck_manifest *seal) {
    const char *v = dck_manifest_get_meta(seal, "seal_step");
    long long named, sealed;
    if (!v || !dck_seal_name_step(ckpt, &named)) return DCK_OK;
    if (!dck_latest_digits(v, strlen(v), &sealed))
        return dck_set_error(DCK_ERR_FORMAT, "%s: seal_step '%s' is not a step", seal_path, v);
    if (sealed != named)
        return dck_set_error(DCK_ERR_MISMATCH, "%s: seal of step %lld, checkpoint's name says step %lld (%s)",
                             seal_path, sealed, named, ckpt);
    return DCK_OK;
}

static int cmp_relpath(const void *x, const void *y, void *ctx) {
    const dck_checkpoint *ck = ctx;
    return strcmp(ck->files[*(const uint32_t *)x]->relpath, ck->files[*(const uint32_t *)y]->relpath);
}

/* "a, b": the files (relative to the checkpoint) of tensor t's pieces,
 * each once, by name (malloc'd). */
static dck_status tensor_holders(const dck_checkpoint *ck, const dck_tensor_entry *t, char **out) {
    *out = NULL;
    uint32_t *f = malloc((t->npieces ? t->npieces : 1) * sizeof *f);
    if (!f) return dck_oom(NULL);
    size_t nf = 0, len = 1;
    for (size_t p = 0; p < t->npieces; p++) {
        size_t j = 0;
        while (j < nf && f[j] != t->pieces[p].file) j++;
        if (j == nf) {
            f[nf++] = t->pieces[p].file;
            len += strlen(ck->files[t->pieces[p].file]->relpath) + 2;
        }
    }
    qsort_r(f, nf, sizeof *f, cmp_relpath, (void *)ck);
    char *s = nf ? malloc(len) : NULL;
    for (size_t j = 0, k = 0; s && j < nf; j++)
        k += (size_t)snprintf(s + k, len - k, "%s%s", j ? ", " : "", ck->files[f[j]]->relpath);
    free(f);
    if (nf && !s) return dck_oom(NULL);
    *out = s;
    return DCK_OK;
}

/* The checkpoint file that holds entry e of the comparison, or NULL (a
 * tensor or value only the seal has). */
static dck_status entry_holders(const dck_checkpoint *ck, const dck_cmp_entry *e, char **out) {
    *out = NULL;
    if (e->kind == DCK_CMP_FILE) return (*out = dck_strdup(e->name)) ? DCK_OK : dck_oom(NULL);
    if (e->kind == DCK_CMP_VALUE) {
        for (size_t i = 0; i < ck->nvalues; i++)
            if (!strcmp(ck->values[i].name, e->name) && ck->value_files[i] < ck->nfiles)
                return (*out = dck_strdup(ck->files[ck->value_files[i]]->relpath)) ? DCK_OK : dck_oom(NULL);
        return DCK_OK;
    }
    long t = dck_checkpoint_find(ck, e->name);
    return t < 0 ? DCK_OK : tensor_holders(ck, &ck->tensors[t], out);
}

dck_status dck_seal_verify(const char *ckpt, const dck_options *opt, dck_seal_result *out) {
    memset(out, 0, sizeof *out);
    DCK_TRY(dck_seal_path(ckpt, &out->seal_path));
    struct stat st;
    dck_status s = DCK_OK;
    dck_checkpoint *ck = NULL;
    if (lstat(out->seal_path, &st) != 0 && errno == ENOENT)
        s = dck_set_error(DCK_ERR_IO, "%s is not sealed (no %s)", ckpt, out->seal_path);
    if (!s) s = dck_seal_load(out->seal_path, &out->seal);
    if (!s) s = dck_seal_check_step(ckpt, out->seal_path, out->seal);
    dck_options o;
    if (opt) o = *opt;
    else dck_options_init(&o);
    /* a seal made from the files has their hashes: they are compared too */
    int files = !s && dck_manifest_file_count(out->seal) > 0;
    o.hash_files = files;
    if (!s) s = dck_checkpoint_open(&ckpt, 1, &o, &ck);
    if (!s) s = dck_checkpoint_hash(ck, &o, &out->actual);
    if (!s) s = dck_manifest_compare(out->seal, out->actual, files, &out->cmp);
    if (!s && out->cmp.n && !(out->holders = calloc(out->cmp.n, sizeof *out->holders))) s = dck_oom(NULL);
    for (size_t i = 0; !s && i < out->cmp.n; i++) s = entry_holders(ck, &out->cmp.entries[i], &out->holders[i]);
    dck_checkpoint_free(ck);
    if (s) {
        dck_seal_result_release(out);
        return s;
    }
    out->same = out->cmp.n == 0;
    return DCK_OK;
}

void dck_seal_result_release(dck_seal_result *r) {
    if (!r) return;
    for (size_t i = 0; r->holders && i < r->cmp.n; i++) free(r->holders[i]);
    free(r->holders);
    dck_cmp_result_release(&r->cmp);
    dck_manifest_free(r->seal);
    dck_manifest_free(r->actual);
    free(r->seal_path);
    memset(r, 0, sizeof *r);
}

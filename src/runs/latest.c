/* The newest sealed checkpoint of a directory (detcheck-latest(1)): the
 * step a checkpoint's name says, by one table of the layouts that trainers
 * write (latest_step.c); the candidates of a directory, newest first; each
 * judged by its seal (detcheck.h, Seals), and with verify by its files too. */
#include "runs/latest.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *const state_names[] = {
    [DCK_LATEST_OLDER] = "older",
    [DCK_LATEST_CHOSEN] = "chosen",
    [DCK_LATEST_LINK] = "symbolic link",
    [DCK_LATEST_SPECIAL] = "not a file or directory",
    [DCK_LATEST_UNSEALED] = "unsealed",
    [DCK_LATEST_TORN_SEAL] = "torn seal",
    [DCK_LATEST_NOT_SEAL] = "not a seal",
    [DCK_LATEST_OTHER_SEAL] = "seal of another step",
    [DCK_LATEST_CORRUPT] = "corrupt",
    [DCK_LATEST_UNREADABLE] = "unreadable",
};

const char *dck_latest_state_name(dck_latest_state s) {
    return (unsigned)s < sizeof state_names / sizeof state_names[0] ? state_names[s] : "?";
}

/* e skipped as state, why formatted (whole, names as they are); only
 * DCK_ERR_NOMEM fails. */
__attribute__((format(printf, 3, 4))) static dck_status skip(dck_latest_entry *e, dck_latest_state state,
                                                             const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = vasprintf(&e->why, fmt, ap);
    va_end(ap);
    if (r < 0) {
        e->why = NULL;
        return dck_oom(NULL);
    }
    e->state = state;
    return DCK_OK;
}

/* Whether seal m (at seal_path) is the seal of e: its seal_step, when
 * given, is the step e's name says, as verify --seal judges it
 * (detcheck-seal(1)); a renamed checkpoint (tmp-checkpoint-500 sealed,
 * then renamed checkpoint-500) keeps its seal. DCK_OK with e skipped when
 * not. */
static dck_status judge_own(dck_latest_entry *e, const dck_manifest *m, const char *seal_path) {
    const char *ms = dck_manifest_get_meta(m, "seal_step");
    long long step;
    if (ms && !dck_latest_digits(ms, strlen(ms), &step))
        return skip(e, DCK_LATEST_NOT_SEAL, "not a seal: %s: seal_step '%s' is not a step", seal_path, ms);
    if (ms && step != e->step)
        return skip(e, DCK_LATEST_OTHER_SEAL, "seal of another step: %s: seal of step %lld, checkpoint's name says step %lld",
                    seal_path, step, e->step);
    return DCK_OK;
}

/* --verify: e's files against its seal. */
static dck_status judge_files(dck_latest_entry *e, const dck_options *opt) {
    dck_seal_result r;
    memset(&r, 0, sizeof r);
    dck_status s = dck_seal_verify(e->path, opt, &r);
    if (s == DCK_ERR_NOMEM) {
        dck_seal_result_release(&r);
        return s;
    }
    if (s) s = skip(e, DCK_LATEST_UNREADABLE, "unreadable: %s", dck_last_error());
    else if (!r.same) {
        /* the first difference as verify calls it out: a tensor's before a file's */
        size_t first = 0;
        while (first < r.cmp.n && r.cmp.entries[first].kind > DCK_CMP_EXTRA) first++;
        if (first == r.cmp.n) first = 0;
        e->differences = r.cmp.n;
        if (r.cmp.n && !(e->first = dck_strdup(r.cmp.entries[first].name))) s = dck_oom(NULL);
        if (!s && r.cmp.n && r.holders && r.holders[first] && !(e->first_files = dck_strdup(r.holders[first])))
            s = dck_oom(NULL);
        if (!s && !r.cmp.n) s = skip(e, DCK_LATEST_CORRUPT, "corrupt: its files do not match its seal");
        else if (!s)
            s = skip(e, DCK_LATEST_CORRUPT, "corrupt: %zu difference%s, first %s%s%s%s", r.cmp.n, r.cmp.n == 1 ? "" : "s",
                     e->first, e->first_files ? " (in " : "", e->first_files ? e->first_files : "", e->first_files ? ")" : "");
    }
    dck_seal_result_release(&r);
    return s;
}

/* Judges candidate e: chosen, or skipped saying why. Only running out of
 * memory fails: whatever is wrong with a candidate skips it. */
static dck_status judge(dck_latest_entry *e, int verify, const dck_options *opt) {
    struct stat st;
    /* links are not followed: a checkpoint of this run is what it wrote
     * here, not what a link points at (elsewhere, or swapped meanwhile) */
    if (lstat(e->path, &st)) return skip(e, DCK_LATEST_UNREADABLE, "unreadable: %s: %s", e->path, strerror(errno));
    if (S_ISLNK(st.st_mode)) return skip(e, DCK_LATEST_LINK, "a symbolic link (not followed)");
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) return skip(e, DCK_LATEST_SPECIAL, "not a file or directory");
    char *seal_path = NULL;
    dck_status s = dck_seal_path(e->path, &seal_path);
    if (s == DCK_ERR_NOMEM) return s;
    if (s) return skip(e, DCK_LATEST_UNREADABLE, "unreadable: %s", dck_last_error());
    dck_manifest *m = NULL;
    if (lstat(seal_path, &st) && errno == ENOENT) {
        s = skip(e, DCK_LATEST_UNSEALED, "unsealed (no %s)", seal_path);
    } else if ((s = dck_seal_load(seal_path, &m))) {
        char msg[DCK_ERROR_MESSAGE_MAX];
        snprintf(msg, sizeof msg, "%s", dck_last_error());
        /* a seal cut short (a save killed while it was written, a full
         * disk) no longer loads as a manifest; a whole manifest without
         * seal: 1, a link or a FIFO there is not a seal at all */
        dck_latest_state why = s == DCK_ERR_IO ? DCK_LATEST_UNREADABLE
                             : s != DCK_ERR_INVALID && !dck_manifest_is_file(seal_path) ? DCK_LATEST_TORN_SEAL
                                                                                        : DCK_LATEST_NOT_SEAL;
        if (s != DCK_ERR_NOMEM) s = skip(e, why, "%s: %s", dck_latest_state_name(why), msg);
    } else {
        s = judge_own(e, m, seal_path);
        if (!s && e->state == DCK_LATEST_OLDER && verify) s = judge_files(e, opt);
        if (!s && e->state == DCK_LATEST_OLDER) e->state = DCK_LATEST_CHOSEN;
    }
    dck_manifest_free(m);
    free(seal_path);
    return s;
}

static int newest_first(const void *x, const void *y) {
    const dck_latest_entry *a = x, *b = y;
    if (a->step != b->step) return a->step > b->step ? -1 : 1;
    return strcmp(a->name, b->name);
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

dck_status dck_latest_find(const char *dir, int verify, const dck_options *opt, dck_latest_judged_fn judged,
                           void *ctx, dck_latest_result *out) {
    memset(out, 0, sizeof *out);
    out->chosen = -1;
    struct stat st;
    if (stat(dir, &st)) return dck_set_error(DCK_ERR_IO, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) return dck_set_error(DCK_ERR_INVALID, "%s: not a directory", dir);
    char **names = NULL;
    size_t n = 0, cap = 0, ocap = 0;
    /* names starting with '.' are temporaries (and the readers skip them) */
    DCK_TRY(dck_list_dir(dir, true, &names, &n));
    dck_status s = DCK_OK;
    for (size_t i = 0; i < n && !s; i++) {
        long long step;
        if (ends_with(names[i], DCK_SEAL_SUFFIX)) continue; /* the seal of a file beside it */
        /* temporaries name no step of the layouts: .names (left out
         * above), tmp-checkpoint-500 (the Hugging Face Trainer's save under
         * way), step_100.pt.tmp */
        if (!dck_latest_step(names[i], &step)) {
            if ((s = dck_grow((void **)&out->others, &ocap, out->nothers + 1, sizeof *out->others))) break;
            out->others[out->nothers++] = names[i];
            names[i] = NULL;
            continue;
        }
        if ((s = dck_grow((void **)&out->entries, &cap, out->n + 1, sizeof *out->entries))) break;
        dck_latest_entry *e = &out->entries[out->n];
        memset(e, 0, sizeof *e);
        e->name = names[i];
        names[i] = NULL;
        e->step = step;
        out->n++;
        if (!(e->path = dck_path_join(dir, e->name))) s = dck_oom(NULL);
    }
    dck_strv_free(names, n);
    if (s) return s;
    if (out->n) dck_qsort(out->entries, out->n, sizeof *out->entries, newest_first);
    for (size_t i = 0; i < out->n && out->chosen < 0; i++) {
        DCK_TRY(judge(&out->entries[i], verify, opt));
        if (out->entries[i].state == DCK_LATEST_CHOSEN) out->chosen = (long)i;
        if (judged) judged(ctx, &out->entries[i]);
    }
    return DCK_OK;
}

void dck_latest_result_release(dck_latest_result *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) {
        dck_latest_entry *e = &r->entries[i];
        free(e->name);
        free(e->path);
        free(e->why);
        free(e->first);
        free(e->first_files);
    }
    free(r->entries);
    dck_strv_free(r->others, r->nothers);
    memset(r, 0, sizeof *r);
    r->chosen = -1;
}

/* dck_run_open / dck_run_free: a recorded run directory read whole, its
 * trajectory, tensor digests, trace and checkpoint list (man
 * detcheck-bisect(1)). A file that is absent is absent; one that is there
 * is read, and refused naming it when malformed (a FIFO or a dangling link
 * too: only ENOENT is absence). */
#include "runs/run.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static bool present(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 || errno != ENOENT;
}

/* The file name of dir, read by load into dst when it is there. */
static dck_status load_optional(const char *dir, const char *name, bool *has,
                                dck_status (*load)(const char *, void *), void *dst) {
    char *p = dck_path_join(dir, name);
    if (!p) return dck_oom(NULL);
    *has = present(p);
    dck_status s = *has ? load(p, dst) : DCK_OK;
    free(p);
    return s;
}

static dck_status load_rec(const char *p, void *dst) { return dck_recording_load(p, dst); }
static dck_status load_trace(const char *p, void *dst) { return dck_trace_load(p, dst); }

dck_status dck_run_open(const char *dir, dck_run **out) {
    *out = NULL;
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return dck_set_error(DCK_ERR_INVALID, "%s: not a directory", dir);
    dck_run *r = calloc(1, sizeof *r);
    if (!r || !(r->dir = strdup(dir))) {
        free(r);
        return dck_oom(NULL);
    }
    char *p = dck_path_join(dir, DCK_TRAJECTORY);
    dck_status s = p ? dck_traj_load(p, &r->traj, &r->ntraj) : dck_oom(NULL);
    free(p);
    if (!s) s = load_optional(dir, DCK_RECORD_FILE, &r->has_rec, load_rec, &r->rec);
    if (!s) s = load_optional(dir, DCK_TRACE_FILE, &r->has_trace, load_trace, &r->trace);
    if (!s) s = dck_ckpt_list(dir, &r->ckpts, &r->nckpts, NULL, NULL);
    if (s) {
        dck_run_free(r);
        return s;
    }
    *out = r;
    return DCK_OK;
}

void dck_run_free(dck_run *r) {
    if (!r) return;
    free(r->dir);
    free(r->traj);
    if (r->has_rec) dck_recording_release(&r->rec);
    if (r->has_trace) dck_trace_release(&r->trace);
    free(r->ckpts);
    free(r);
}

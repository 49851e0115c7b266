/* The trainer's checkpoints: the clearing of a step directory for a new
 * checkpoint, and the state tensors, root digest, save, verify, load and
 * resume of the training loop (reading the checkpoints of a run:
 * runs/checkpoints.c; the trajectory log: runs/trajectory.c). A checkpoint
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

/* ------------------------------------------------------------------ the trainer's checkpoints
 * The built-in trainer's state tensors (model., optimizer.master.,
 * optimizer.exp_avg., optimizer.exp_avg_sq.), their root digest, and its
 * checkpoints: written, verified and loaded to resume (train_state.h;
 * man detcheck-train(1)). The includes of this part are its own. */
#include "train/train_state.h"

#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { K_MODEL, K_MASTER, K_EXP_AVG, K_EXP_AVG_SQ, K_COUNT };
static const char *const kind_prefix[K_COUNT] = {"model.", "optimizer.master.",
                                                 "optimizer.exp_avg.", "optimizer.exp_avg_sq."};

static bool is_bf16(const dck_train_config *c) { return c->precision == DCK_PREC_BF16; }

static void note(const dck_train_state *st, int warning, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void note(const dck_train_state *st, int warning, const char *fmt, ...) {
    if (!st->say) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    st->say(st->ctx, warning, msg);
}

static int nkinds(void) { return K_COUNT; }

static bool kind_present(const dck_train_state *st, int k) { return k != K_MASTER || is_bf16(st->c); }

/* The slice [a, b) of state tensor (k, t) that this rank owns. */
static void owned(const dck_train_state *st, size_t t, size_t *a, size_t *b) {
    const dck_param *p = &st->m->params[t];
    *a = p->offset > st->lo ? p->offset : st->lo;
    *b = p->offset + p->numel < st->hi ? p->offset + p->numel : st->hi;
    if (*b < *a) *b = *a;
}

static void state_name(const dck_train_state *st, int k, size_t t, char *buf, size_t n) {
    snprintf(buf, n, "%s%s", kind_prefix[k], st->m->params[t].name + strlen("model."));
}

static dck_dtype state_dtype(const dck_train_state *st, int k) {
    return (k == K_MODEL && is_bf16(st->c)) ? DCK_BF16 : DCK_F32;
}

static const void *state_data(const dck_train_state *st, int k, size_t a) {
    switch (k) {
    case K_MODEL:
        return is_bf16(st->c) ? (const void *)(st->bf16 + (a - st->lo)) : (const void *)(st->master + a);
    case K_MASTER:
        return st->master + a;
    case K_EXP_AVG:
        return st->m1 + (a - st->lo);
    default:
        return st->m2 + (a - st->lo);
    }
}

static void refresh_bf16(const dck_train_state *st) {
    if (!is_bf16(st->c)) return;
    for (size_t i = st->lo; i < st->hi; i++) st->bf16[i - st->lo] = dck_f32_to_bf16(st->master[i]);
}

/* Root digest over every model and optimizer tensor: each rank reduces its
 * slices to fragment partials, the partials travel as bytes, every rank
 * finishes the same digests. */
dck_status dck_train_state_root(const dck_train_state *st, dck_digest *root) {
    size_t np = st->m->nparams, nt = np * (size_t)nkinds();
    dck_fragment_partial *mine = dck_xcalloc(nt, sizeof *mine);
    dck_fragment_partial *all = dck_xcalloc(nt * (size_t)st->K, sizeof *all);
    char **names = dck_xcalloc(nt, sizeof *names);
    dck_digest *dg = dck_xcalloc(nt, sizeof *dg);
    dck_status s = DCK_OK;
    if (!mine || !all || !names || !dg) {
        s = dck_oom("train");
        goto done;
    }
    refresh_bf16(st);
    for (int k = 0; k < K_COUNT && !s; k++) {
        if (!kind_present(st, k)) continue;
        for (size_t t = 0; t < np && !s; t++) {
            const dck_param *p = &st->m->params[t];
            size_t a, b;
            owned(st, t, &a, &b);
            if (b == a) continue;
            size_t es = dck_dtype_size(state_dtype(st, k));
            s = dck_fragment_partial_compute((uint64_t)p->numel * es, (uint64_t)(a - p->offset) * es,
                                             state_data(st, k, a), (b - a) * es,
                                             &mine[(size_t)k * np + t]);
        }
    }
    s = dck_comm_agree(st->comm, s);
    if (s) goto done;
    if ((s = dck_comm_allgather(st->comm, mine, all, nt * sizeof *mine))) goto done;
    size_t n = 0;
    for (int k = 0; k < K_COUNT && !s; k++) {
        if (!kind_present(st, k)) continue;
        for (size_t t = 0; t < np && !s; t++) {
            const dck_param *p = &st->m->params[t];
            dck_tensor_hasher *h;
            if ((s = dck_tensor_hasher_create(state_dtype(st, k), p->shape, p->ndim, &h))) break;
            for (int r = 0; r < st->K && !s; r++) {
                const dck_fragment_partial *fp = &all[(size_t)r * nt + (size_t)k * np + t];
                if (fp->length) s = dck_tensor_hasher_add(h, fp);
            }
            if (!s) s = dck_tensor_hasher_final(h, &dg[n]);
            dck_tensor_hasher_free(h);
            char nm[160];
            state_name(st, k, t, nm, sizeof nm);
            if (!s && !(names[n] = dck_strdup(nm))) s = dck_oom(NULL);
            n++;
        }
    }
    if (!s) *root = dck_root_digest((const char *const *)names, dg, n);
done:
    if (names)
        for (size_t i = 0; i < nt; i++) free(names[i]);
    free(names);
    free(dg);
    free(mine);
    free(all);
    return s;
}

dck_status dck_train_mkdir_p(const char *path) {
    char buf[DCK_TRAIN_PATH * 2];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return dck_set_error(DCK_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return dck_set_error(DCK_ERR_IO, "%s: cannot create directory: %s", buf, strerror(errno));
    return DCK_OK;
}

static dck_status write_shard(const dck_train_state *st, const char *dir, long step, float lr) {
    size_t np = st->m->nparams;
    size_t cap = np * K_COUNT + 8;
    dck_st_tensor *ts = dck_xcalloc(cap, sizeof *ts);
    char (*names)[160] = dck_xcalloc(cap, sizeof *names);
    if (!ts || !names) {
        free(ts);
        free(names);
        return dck_oom("train");
    }
    refresh_bf16(st);
    size_t n = 0;
    for (int k = 0; k < K_COUNT; k++) {
        if (!kind_present(st, k)) continue;
        for (size_t t = 0; t < np; t++) {
            const dck_param *p = &st->m->params[t];
            size_t a, b;
            owned(st, t, &a, &b);
            if (b == a) continue;
            dck_st_tensor *x = &ts[n];
            state_name(st, k, t, names[n], sizeof names[n]);
            x->name = names[n];
            x->dtype = state_dtype(st, k);
            x->ndim = p->ndim;
            x->data = state_data(st, k, a);
            uint64_t row0 = (a - p->offset) / p->row, rows = (b - a) / p->row;
            x->shape[0] = rows;
            if (p->ndim > 1) x->shape[1] = p->shape[1];
            if (rows != p->shape[0]) {
                x->global_ndim = p->ndim;
                x->global_shape[0] = p->shape[0];
                x->global_shape[1] = p->shape[1];
                x->offset[0] = row0;
            }
            n++;
        }
    }
    /* replicated state, written once by rank 0 */
    uint32_t key[2] = {(uint32_t)st->c->seed, (uint32_t)(st->c->seed >> 32)};
    uint64_t next_sample = (uint64_t)step * (uint64_t)st->M * (uint64_t)st->c->batch;
    int64_t step64 = step;
    float lrs[1] = {lr};
    if (st->rank == 0) {
        ts[n++] = (dck_st_tensor){.name = "rng.philox.key", .dtype = DCK_U32, .ndim = 1,
                                  .shape = {2}, .data = key};
        ts[n++] = (dck_st_tensor){.name = "rng.data.next_sample", .dtype = DCK_U64, .ndim = 1,
                                  .shape = {1}, .data = &next_sample};
        ts[n++] = (dck_st_tensor){.name = "step", .dtype = DCK_I64, .ndim = 1, .shape = {1},
                                  .data = &step64};
        ts[n++] = (dck_st_tensor){.name = "scheduler.last_lr", .dtype = DCK_F32, .ndim = 1,
                                  .shape = {1}, .data = lrs};
        ts[n++] = (dck_st_tensor){.name = "config.train", .dtype = DCK_U8, .ndim = 1,
                                  .shape = {strlen(*st->config_json)}, .data = *st->config_json};
    }
    char stepbuf[32];
    snprintf(stepbuf, sizeof stepbuf, "%ld", step);
    dck_kv meta[] = {{"detcheck.train.config", *st->config_json}, {"detcheck.train.step", stepbuf}};
    char fname[96];
    snprintf(fname, sizeof fname, "rank_%05d_of_%05d.safetensors%s", st->rank, st->K,
             st->c->compress ? ".zst" : "");
    char *path = dck_path_join(dir, fname);
    dck_status s = path ? dck_safetensors_write(path, ts, n, meta, 2, st->c->compress)
                        : dck_oom(NULL);
    free(path);
    free(ts);
    free(names);
    return s;
}

dck_status dck_train_ckpt_save(const dck_train_state *st, long step, float lr) {
    char *dir = dck_ckpt_dir(st->c->out, step);
    if (!dir) return dck_oom(NULL);
    dck_status s = DCK_OK;
    /* only what detcheck wrote goes, and no link is followed (train_ckpt.c) */
    if (st->rank == 0) s = dck_ckpt_prepare_dir(st->c->out, step);
    s = dck_comm_agree(st->comm, s);
    if (!s) s = dck_comm_agree(st->comm, write_shard(st, dir, step, lr));
    if (!s && step == st->c->kill_during_ckpt) {
        /* testing hook: die in the middle of the checkpoint, after the shards and
         * part of the manifest, before the marker */
        if (st->rank == 0) {
            char *p = dck_path_join(dir, DCK_CKPT_MANIFEST ".partial");
            FILE *f = p ? fopen(p, "wb") : NULL;
            if (f) {
                fputs("{\"detcheck_manifest\": 1, \"tens", f);
                fflush(f);
                fsync(fileno(f));
            }
            dck_comm_barrier(st->comm);
            raise(SIGKILL);
        }
        dck_comm_barrier(st->comm);
        raise(SIGKILL);
    }
    if (!s && st->rank == 0) {
        char **shards = NULL;
        size_t ns = 0;
        dck_manifest *man = NULL;
        dck_options opt;
        dck_options_init(&opt);
        opt.threads = st->T;
        opt.hash_files = 1;
        s = dck_ckpt_shards(dir, &shards, &ns);
        if (!s) s = dck_hash_paths((const char *const *)shards, ns, &opt, &man);
        char *mpath = dck_path_join(dir, DCK_CKPT_MANIFEST);
        if (!s) s = dck_manifest_save(man, DCK_FORMAT_JSON, mpath);
        if (!s) {
            char hex[33], marker[256];
            dck_digest_to_hex(dck_manifest_root(man), hex);
            int len = snprintf(marker, sizeof marker,
                               "detcheck checkpoint v1\nstep %ld\nranks %d\nmanifest-root %s\n",
                               step, st->K, hex);
            char *mk = dck_path_join(dir, DCK_CKPT_MARKER);
            s = dck_write_file_atomic(mk, marker, (size_t)len);
            free(mk);
        }
        free(mpath);
        dck_manifest_free(man);
        dck_free_strings(shards, ns);
        if (!s && st->traj && (fflush(st->traj) != 0 || fsync(fileno(st->traj)) != 0))
            s = dck_set_error(DCK_ERR_IO, "%s: cannot write: %s", st->traj_path, strerror(errno));
    }
    s = dck_comm_agree(st->comm, s);
    free(dir);
    if (!s && step == st->c->kill_after_ckpt) {
        dck_comm_barrier(st->comm);
        raise(SIGKILL);
    }
    return s;
}

/* Recomputes the digests of a checkpoint's shards and compares them with its
 * manifest: a resume never starts from silently damaged state. */
static dck_status verify_checkpoint(const dck_train_state *st, const char *dir) {
    char *mpath = dck_path_join(dir, DCK_CKPT_MANIFEST);
    dck_manifest *stored = NULL, *fresh = NULL;
    char **shards = NULL;
    size_t ns = 0;
    dck_status s = mpath ? dck_manifest_load(mpath, &stored) : dck_oom("train");
    if (!s) s = dck_ckpt_shards(dir, &shards, &ns);
    if (!s) {
        dck_options opt;
        dck_options_init(&opt);
        opt.threads = st->T;
        opt.hash_files = 1;
        s = dck_hash_paths((const char *const *)shards, ns, &opt, &fresh);
    }
    if (!s) {
        dck_cmp_result r;
        s = dck_manifest_compare(stored, fresh, 1, &r);
        if (!s && r.n)
            s = dck_set_error(DCK_ERR_MISMATCH, "%s: %s differs from its manifest (%s)", dir,
                              r.entries[0].name, dck_cmp_kind_name(r.entries[0].kind));
        if (!s || r.n) dck_cmp_result_release(&r);
    }
    dck_free_strings(shards, ns);
    dck_manifest_free(stored);
    dck_manifest_free(fresh);
    free(mpath);
    return s;
}

static dck_status read_whole(dck_checkpoint *ck, const char *dir, const char *name, dck_dtype dt,
                             const uint64_t *shape, int ndim, void *buf, uint64_t off, size_t len) {
    long i = dck_checkpoint_find(ck, name);
    if (i < 0) return dck_set_error(DCK_ERR_MISMATCH, "%s: tensor %s is missing", dir, name);
    const dck_tensor_info *ti = dck_checkpoint_tensor(ck, (size_t)i);
    bool same = ti->dtype == dt && ti->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = ti->shape[d] == shape[d];
    if (!same)
        return dck_set_error(DCK_ERR_MISMATCH, "%s: tensor %s has dtype %s and another shape than "
                             "this run's %s",
                             dir, name, dck_dtype_name(ti->dtype), dck_dtype_name(dt));
    return dck_checkpoint_read(ck, (size_t)i, off, buf, len);
}

static dck_status load_checkpoint(const dck_train_state *st, const char *dir, long *step_out) {
    char **shards = NULL;
    size_t ns = 0;
    dck_checkpoint *ck = NULL;
    char *stored = NULL;
    dck_status s = dck_ckpt_shards(dir, &shards, &ns);
    dck_options opt;
    dck_options_init(&opt);
    opt.threads = 1;
    opt.hash_files = 0;
    if (!s) s = dck_checkpoint_open((const char *const *)shards, ns, &opt, &ck);
    if (s) goto done;
    long ci = dck_checkpoint_find(ck, "config.train");
    if (ci < 0) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: not a detcheck train checkpoint (no config.train)", dir);
        goto done;
    }
    const dck_tensor_info *cinfo = dck_checkpoint_tensor(ck, (size_t)ci);
    if (cinfo->dtype != DCK_U8 || cinfo->ndim != 1 || cinfo->shape[0] > (1u << 20)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: config.train is not a short U8 vector", dir);
        goto done;
    }
    stored = dck_xcalloc(cinfo->shape[0] + 1, 1);
    if (!stored) {
        s = dck_oom(NULL);
        goto done;
    }
    if ((s = dck_checkpoint_read(ck, (size_t)ci, 0, stored, cinfo->shape[0]))) goto done;
    if (!st->c->decay_set) {
        /* the schedule length follows the checkpoint unless given */
        json_t *o = json_loads(stored, 0, NULL);
        json_t *d = o ? json_object_get(o, "decay_steps") : NULL;
        if (json_is_integer(d) && json_integer_value(d) > 0) st->c->decay_steps = (long)json_integer_value(d);
        json_decref(o);
        free(*st->config_json);
        DCK_TRY_GOTO(s, dck_train_config_json(st->c, st->config_json), done);
    }
    if ((s = dck_train_config_match(st->c, stored, dir))) goto done;
    int64_t step = 0;
    uint64_t one = 1, two = 2, next = 0;
    uint32_t key[2];
    if ((s = read_whole(ck, dir, "step", DCK_I64, &one, 1, &step, 0, 8))) goto done;
    if ((s = read_whole(ck, dir, "rng.data.next_sample", DCK_U64, &one, 1, &next, 0, 8))) goto done;
    if ((s = read_whole(ck, dir, "rng.philox.key", DCK_U32, &two, 1, key, 0, 8))) goto done;
    if (step < 0 || next != (uint64_t)step * (uint64_t)st->M * (uint64_t)st->c->batch ||
        key[0] != (uint32_t)st->c->seed || key[1] != (uint32_t)(st->c->seed >> 32)) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: step %lld, data position %llu and RNG key disagree",
                          dir, (long long)step, (unsigned long long)next);
        goto done;
    }
    size_t np = st->m->nparams;
    for (size_t t = 0; t < np && !s; t++) {
        const dck_param *p = &st->m->params[t];
        char nm[160];
        state_name(st, is_bf16(st->c) ? K_MASTER : K_MODEL, t, nm, sizeof nm);
        s = read_whole(ck, dir, nm, DCK_F32, p->shape, p->ndim, st->master + p->offset, 0,
                       p->numel * 4);
        size_t a, b;
        owned(st, t, &a, &b);
        if (!s && is_bf16(st->c) && b > a) {
            state_name(st, K_MODEL, t, nm, sizeof nm);
            s = read_whole(ck, dir, nm, DCK_BF16, p->shape, p->ndim, st->bf16 + (a - st->lo),
                           (a - p->offset) * 2, (b - a) * 2);
            for (size_t i = a; !s && i < b; i++)
                if (st->bf16[i - st->lo] != dck_f32_to_bf16(st->master[i]))
                    s = dck_set_error(DCK_ERR_FORMAT,
                                      "%s: %s disagrees with its fp32 master at element %zu", dir,
                                      nm, i - p->offset);
        }
        for (int k = K_EXP_AVG; k <= K_EXP_AVG_SQ && !s && b > a; k++) {
            state_name(st, k, t, nm, sizeof nm);
            float *dst = (k == K_EXP_AVG ? st->m1 : st->m2) + (a - st->lo);
            s = read_whole(ck, dir, nm, DCK_F32, p->shape, p->ndim, dst, (a - p->offset) * 4,
                           (b - a) * 4);
        }
    }
    if (!s) *step_out = (long)step;
done:
    free(stored);
    dck_checkpoint_free(ck);
    dck_free_strings(shards, ns);
    return s;
}

static void warn_cb(void *ctx, const char *msg) { note(ctx, 1, "%s", msg); }

/* Finds and loads the checkpoint to resume from; *step = 0 when none. */
dck_status dck_train_ckpt_resume(const dck_train_state *st, long *step) {
    *step = 0;
    if (st->c->resume_from[0]) {
        const char *dir = st->c->resume_from;
        char *mk = dck_path_join(dir, DCK_CKPT_MARKER);
        struct stat sb;
        bool ok = mk && stat(mk, &sb) == 0;
        free(mk);
        if (!ok)
            return dck_set_error(DCK_ERR_FORMAT, "%s: not a complete checkpoint (no %s marker)", dir,
                                 DCK_CKPT_MARKER);
        dck_status s = verify_checkpoint(st, dir);
        if (!s) s = load_checkpoint(st, dir, step);
        return s;
    }
    long *steps = NULL;
    size_t n = 0;
    dck_status s = dck_ckpt_list(st->c->out, &steps, &n, warn_cb, (void *)st);
    if (s) return s;
    for (size_t i = n; i-- > 0;) {
        char *dir = dck_ckpt_dir(st->c->out, steps[i]);
        if (!dir) {
            s = dck_oom(NULL);
            break;
        }
        s = verify_checkpoint(st, dir);
        if (s == DCK_ERR_MISMATCH || s == DCK_ERR_FORMAT || s == DCK_ERR_TRUNCATED ||
            s == DCK_ERR_LAYOUT) {
            note(st, 1, "%s: damaged checkpoint skipped: %s", dir, dck_last_error());
            free(dir);
            s = DCK_OK;
            continue;
        }
        if (!s) {
            s = load_checkpoint(st, dir, step);
            if (!s) note(st, 0, "resuming from %s", dir);
        }
        free(dir);
        break;
    }
    free(steps);
    if (!s && *step == 0) note(st, 0, "%s: no complete checkpoint, starting from step 0", st->c->out);
    return s;
}

/* The sides of a diff: what the comparison engine (diff.c) compares.
 * Opening each path as a manifest or a checkpoint, each side's tensors in
 * name order (the options' selection), reading their bytes (in place from
 * a file's map, or with pread; pages let go as the engine goes), the
 * values of the two sides, and the model's order of the union of their
 * tensors. */
#include "diff/diff_sides.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ------------------------------------------------------------------ each side's tensors */

static int cmp_side_tensor(const void *x, const void *y) {
    return dck_name_compare(((const side_tensor *)x)->name, ((const side_tensor *)y)->name);
}

static int group_selected(unsigned mask, dck_group g) { return !mask || (mask & (1u << g)); }

/* --exclude: a name any glob matches is left out of the comparison. */
static int excluded(const dck_diff_options *o, const char *name) {
    for (size_t i = 0; i < o->nexclude; i++)
        if (fnmatch(o->exclude[i], name, 0) == 0) return 1;
    return 0;
}

dck_status dck_diff_side_build(side *sd, const dck_diff_options *o) {
    unsigned groups = o->groups;
    size_t n = sd->ck ? dck_checkpoint_tensor_count(sd->ck) : dck_manifest_tensor_count(sd->m);
    sd->t = dck_xcalloc(n ? n : 1, sizeof *sd->t);
    if (!sd->t) return dck_oom(NULL);
    sd->n = 0;
    for (size_t i = 0; i < n; i++) {
        side_tensor *st = &sd->t[sd->n];
        if (sd->ck) {
            const dck_tensor_info *ti = dck_checkpoint_tensor(sd->ck, i);
            st->name = ti->name;
            st->group = ti->group;
            st->dtype = ti->dtype;
            st->ndim = ti->ndim;
            st->shape = ti->shape;
            st->nbytes = ti->nbytes;
            st->index = i;
        } else {
            const dck_manifest_tensor *mt = dck_manifest_tensor_at(sd->m, i);
            st->name = mt->name;
            st->group = mt->group;
            st->dtype = mt->dtype;
            st->ndim = mt->ndim;
            st->shape = mt->shape;
            if (dck_shape_bytes(mt->dtype, mt->shape, mt->ndim, &st->nbytes) != DCK_OK)
                st->nbytes = 0;
            st->has_digest = 1;
            st->digest = mt->digest;
        }
        if (group_selected(groups, st->group) && !(o->nexclude && excluded(o, st->name))) sd->n++;
    }
    qsort(sd->t, sd->n, sizeof *sd->t, cmp_side_tensor);
    return DCK_OK;
}

/* ------------------------------------------------------------------ reading */

/* The piece of a tensor stored as one contiguous row-major run (a single
 * piece covering the whole tensor, neither strided nor byte-swapped), whose
 * bytes can be read in place from the file's map; NULL otherwise. */
static const dck_piece *contiguous_piece(const dck_checkpoint *ck, size_t index) {
    const dck_tensor_entry *t = &ck->tensors[index];
    if (t->npieces != 1 || !t->info.nbytes) return NULL;
    const dck_piece *p = &t->pieces[0];
    if (p->strides || p->byteswap) return NULL;
    dck_piece_geom g;
    dck_piece_geom_of(t, p, &g);
    return g.q < 0 ? p : NULL;
}

/* At most this many files per checkpoint are mapped for in-place reads
 * (each map is one entry of the process's map table); beyond it raw files
 * are read with pread. */
#define DIRECT_MAX_FILES 4096u

/* A raw file is mapped for in-place reads only while it still has the size
 * it was opened with: bytes of a map past the end of a file that shrank
 * would fault, where pread reports the truncation (with its message). */
static int size_unchanged(dck_file *f) {
    return dck_file_size_now(f) >= f->size;
}

/* dck_checkpoint_read maps a file lazily (zstd: decompresses it to a
 * temporary) for compressed files and strided or byte-swapped pieces; that
 * first map is not meant to race, so it is done here, before the chunk
 * workers start: one thread per file (files are independent). Raw files
 * holding contiguous tensors are mapped too, and those tensors are read in
 * place (no copy; each worker lets go of a chunk's pages when done with it,
 * dck_diff_release_direct). Other raw pieces are read with pread. */
static dck_status premap_task(void *ctx, size_t i, int worker) {
    (void)worker;
    dck_file **files = ctx;
    const uint8_t *d;
    uint64_t n;
    return dck_file_map(files[i], &d, &n);
}

dck_status dck_diff_premap(side *a, side *b, int threads) {
    size_t cap = (a->ck ? a->ck->nfiles : 0) + (b->ck ? b->ck->nfiles : 0), n = 0;
    if (!cap) return DCK_OK;
    dck_file **files = dck_xcalloc(cap, sizeof *files);
    if (!files) return dck_oom(NULL);
    for (int side_i = 0; side_i < 2; side_i++) {
        dck_checkpoint *ck = side_i ? b->ck : a->ck;
        if (!ck) continue;
        int direct = ck->nfiles <= DIRECT_MAX_FILES;
        /* per file: 0 not looked at, 1 queued, -1 not to be mapped for
         * in-place reads (it shrank) */
        signed char *state = dck_xcalloc(ck->nfiles ? ck->nfiles : 1, 1);
        if (!state) {
            free(files);
            return dck_oom(NULL);
        }
        for (size_t ti = 0; ti < ck->ntensors; ti++) {
            const dck_tensor_entry *t = &ck->tensors[ti];
            int in_place = direct && contiguous_piece(ck, ti) != NULL;
            for (size_t pi = 0; pi < t->npieces; pi++) {
                const dck_piece *p = &t->pieces[pi];
                dck_file *f = ck->files[p->file];
                if (f->mapped || state[p->file] > 0) continue;
                if (!(f->zstd || p->strides || p->byteswap)) {
                    if (!in_place || state[p->file] < 0) continue;
                    if (!size_unchanged(f)) {
                        state[p->file] = -1;
                        continue;
                    }
                }
                state[p->file] = 1;
                if (n < cap) files[n++] = f;
            }
        }
        free(state);
    }
    dck_status s = dck_parallel_for_status(threads, n, premap_task, files);
    free(files);
    return s;
}

/* After dck_diff_premap: where each contiguous tensor's bytes lie in its
 * file's map (a tensor whose bytes reach past the end of the map is left
 * to dck_checkpoint_read, which says so), and which mapped files the other
 * tensors are read from through the map. */
dck_status dck_diff_side_set_direct(side *sd) {
    if (!sd->ck) return DCK_OK;
    sd->whole = dck_xcalloc(sd->ck->nfiles ? sd->ck->nfiles : 1, 1);
    if (!sd->whole) return dck_oom(NULL);
    for (size_t i = 0; i < sd->n; i++) {
        side_tensor *st = &sd->t[i];
        const dck_piece *p = contiguous_piece(sd->ck, st->index);
        st->direct = NULL;
        if (p) {
            dck_file *f = sd->ck->files[p->file];
            if (f->mapped && f->map && p->file_offset <= f->map_len &&
                st->nbytes <= f->map_len - p->file_offset) {
                st->direct = f->map + p->file_offset;
            }
        }
        if (st->direct) continue;
        const dck_tensor_entry *t = &sd->ck->tensors[st->index];
        for (size_t k = 0; k < t->npieces; k++) sd->whole[t->pieces[k].file] = 1;
    }
    return DCK_OK;
}

/* Whether any mapped file is read through dck_checkpoint_read. */
int dck_diff_side_reads_maps(const side *sd) {
    for (size_t i = 0; sd->ck && i < sd->ck->nfiles; i++)
        if (sd->whole[i] && sd->ck->files[i]->mapped) return 1;
    return 0;
}

/* Mapped files (zstd temporaries, strided pieces) count in the resident set
 * as their pages are touched; between windows, when no worker runs, the
 * pages are dropped from this process (the page cache keeps them), so the
 * resident set stays bounded by a window, not by the checkpoint. */
void dck_diff_side_release_maps(side *sd) {
    if (!sd->ck) return;
    for (size_t i = 0; i < sd->ck->nfiles; i++) {
        dck_file *f = sd->ck->files[i];
        if (sd->whole[i] && f->mapped && f->map && f->map_len)
            (void)madvise((void *)f->map, (size_t)f->map_len, MADV_DONTNEED);
    }
}

/* A worker done with bytes [off, off+len) of a tensor read in place drops
 * their pages from this process (the page cache keeps them): the resident
 * set holds the chunks in work, whatever the size of the checkpoint. The
 * range is widened to whole pages; a neighbouring chunk that shares an end
 * page and is still in work finds it again on its next access (the map is
 * read-only and file-backed: nothing is lost). */
void dck_diff_release_direct(const side_tensor *st, uint64_t off, size_t len) {
    if (!st->direct || !len) return;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)(st->direct + off), hi = lo + len;
    lo -= lo % page;
    hi += (page - hi % page) % page;
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static dck_status read_side(side *sd, const side_tensor *st, uint64_t off, void *buf, size_t len) {
    dck_status s = dck_checkpoint_read(sd->ck, st->index, off, buf, len);
    if (s != DCK_OK) {
        const char *m = dck_last_error();
        if (!m || !*m) dck_set_error(s, "%s: tensor %s: %s", sd->label, st->name, dck_strerror(s));
    }
    return s;
}

/* Bytes [off, off+len) of a tensor: in place in the file's map when the
 * tensor is contiguous there, else read into buf. */
dck_status dck_diff_side_bytes(side *sd, const side_tensor *st, uint64_t off, size_t len,
                             uint8_t *buf, const uint8_t **out) {
    if (st->direct) {
        *out = st->direct + off;
        return DCK_OK;
    }
    *out = buf;
    return read_side(sd, st, off, buf, len);
}

/* A side's file that changed while it was read: pages it lost (read as
 * zeros, io.c), with sizes also a mapped file's size now (a cut inside a
 * page loses no page). */
dck_status dck_diff_side_changed(const side *sd, int sizes) {
    if (!sd->ck) return DCK_OK;
    if (sizes) return dck_files_check(sd->ck->files, sd->ck->nfiles);
    for (size_t i = 0; i < sd->ck->nfiles; i++)
        if (dck_file_changed(sd->ck->files[i])) return dck_file_changed_error(sd->ck->files[i]);
    return DCK_OK;
}

/* ------------------------------------------------------------------ values */

typedef struct {
    const char *name, *value;
} value_ref;

static int cmp_value_ref(const void *x, const void *y) {
    return strcmp(((const value_ref *)x)->name, ((const value_ref *)y)->name);
}

static dck_status side_values(const side *sd, value_ref **out, size_t *n) {
    size_t k = sd->ck ? dck_checkpoint_value_count(sd->ck) : dck_manifest_value_count(sd->m);
    value_ref *v = dck_xcalloc(k ? k : 1, sizeof *v);
    if (!v) return dck_oom(NULL);
    for (size_t i = 0; i < k; i++) {
        const dck_manifest_value *mv =
            sd->ck ? dck_checkpoint_value(sd->ck, i) : dck_manifest_value_at(sd->m, i);
        v[i] = (value_ref){mv->name, mv->value};
    }
    qsort(v, k, sizeof *v, cmp_value_ref);
    *out = v;
    *n = k;
    return DCK_OK;
}

static dck_status add_value_diff(dck_diff_result *r, size_t *cap, const char *name,
                                 const char *a, const char *b) {
    dck_status s = dck_grow((void **)&r->values, cap, r->nvalues + 1, sizeof *r->values);
    if (s) return s;
    dck_diff_value *v = &r->values[r->nvalues];
    v->name = dck_strdup(name);
    v->a = a ? dck_strdup(a) : NULL;
    v->b = b ? dck_strdup(b) : NULL;
    if (!v->name || (a && !v->a) || (b && !v->b)) {
        free((char *)v->name);
        free((char *)v->a);
        free((char *)v->b);
        return dck_oom(NULL);
    }
    r->nvalues++;
    return DCK_OK;
}

/* Drops the values --exclude leaves out. */
static void exclude_values(const dck_diff_options *o, value_ref *v, size_t *n) {
    size_t k = 0;
    for (size_t i = 0; i < *n; i++)
        if (!excluded(o, v[i].name)) v[k++] = v[i];
    *n = k;
}

dck_status dck_diff_compare_values(const side *a, const side *b, const dck_diff_options *o,
                                 dck_diff_result *r) {
    value_ref *va = NULL, *vb = NULL;
    size_t na = 0, nb = 0, cap = 0;
    dck_status s = side_values(a, &va, &na);
    if (!s) s = side_values(b, &vb, &nb);
    if (!s && o->nexclude) {
        exclude_values(o, va, &na);
        exclude_values(o, vb, &nb);
    }
    size_t i = 0, j = 0;
    while (!s && (i < na || j < nb)) {
        int c = i >= na ? 1 : j >= nb ? -1 : strcmp(va[i].name, vb[j].name);
        if (c < 0) {
            s = add_value_diff(r, &cap, va[i].name, va[i].value, NULL);
            i++;
        } else if (c > 0) {
            s = add_value_diff(r, &cap, vb[j].name, NULL, vb[j].value);
            j++;
        } else {
            if (strcmp(va[i].value, vb[j].value) != 0)
                s = add_value_diff(r, &cap, va[i].name, va[i].value, vb[j].value);
            i++;
            j++;
        }
    }
    free(va);
    free(vb);
    return s;
}

/* ------------------------------------------------------------ model order
 * The union of the two sides' tensors is built in name order (names are
 * matched by a merge). Where a checkpoint keeps its tensors' order (the
 * model's: dck_ck_keeps_order), the result takes it: A's, else B's. A tensor
 * only on the other side goes right after the tensor before it on its side
 * that the first side has (first of all when there is none). */
typedef struct {
    uint64_t k1, k3; /* k1: the main side's seq + 1 (of the anchor for the other's tensors) */
    int k2;          /* 0: on the main side; 1: the other's only, after k1's tensor */
    size_t i;        /* name order: the last tie-break */
} order_key;

static int cmp_order_key(const void *x, const void *y) {
    const order_key *a = x, *b = y;
    if (a->k1 != b->k1) return a->k1 < b->k1 ? -1 : 1;
    if (a->k2 != b->k2) return a->k2 < b->k2 ? -1 : 1;
    if (a->k3 != b->k3) return a->k3 < b->k3 ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;
}

static uint64_t seq_of(const side *sd, const side_tensor *t) { return sd->ck->tensors[t->index].seq; }

static int cmp_u64_pair(const void *x, const void *y) {
    const uint64_t *a = x, *b = y;
    return a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : (a[1] < b[1] ? -1 : a[1] > b[1]);
}

dck_status dck_diff_model_order(dck_diff_result *r, const side *a, const side *b, const side_tensor *const *ta,
                              const side_tensor *const *tb) {
    int keep_a = a->ck && dck_ck_keeps_order(a->ck), keep_b = b->ck && dck_ck_keeps_order(b->ck);
    r->order = keep_a ? DCK_DIFF_ORDER_A : keep_b ? DCK_DIFF_ORDER_B : DCK_DIFF_ORDER_NAME;
    if (r->order == DCK_DIFF_ORDER_NAME || r->ntensors < 2) return DCK_OK;
    const side *mo = keep_a ? a : b, *ot = keep_a ? b : a;
    const side_tensor *const *tm = keep_a ? ta : tb, *const *to = keep_a ? tb : ta;
    int keep_o = keep_a && keep_b;
    size_t n = r->ntensors;
    order_key *key = dck_xcalloc(n, sizeof *key);
    uint64_t *walk = dck_xcalloc(2 * n, sizeof *walk); /* the other side's tensors: (its order, index) */
    dck_diff_tensor *sorted = dck_xcalloc(n, sizeof *sorted);
    if (!key || !walk || !sorted) {
        free(key);
        free(walk);
        free(sorted);
        return dck_oom(NULL);
    }
    size_t nw = 0;
    for (size_t i = 0; i < n; i++) {
        key[i].i = i;
        if (tm[i]) key[i].k1 = seq_of(mo, tm[i]) + 1;
        if (to[i]) {
            walk[2 * nw] = keep_o ? seq_of(ot, to[i]) : i;
            walk[2 * nw++ + 1] = i;
        }
    }
    qsort(walk, nw, 2 * sizeof *walk, cmp_u64_pair);
    /* along the other side: anchors of its own tensors; the shared ones out
     * of the main side's order are a disagreement */
    uint64_t anchor = 0, last_shared = 0;
    for (size_t w = 0; w < nw; w++) {
        size_t i = (size_t)walk[2 * w + 1];
        if (tm[i]) {
            if (keep_o && key[i].k1 < last_shared) r->orders_disagree = 1;
            last_shared = anchor = key[i].k1;
        } else {
            key[i].k1 = anchor;
            key[i].k2 = 1;
            key[i].k3 = w;
        }
    }
    qsort(key, n, sizeof *key, cmp_order_key);
    for (size_t k = 0; k < n; k++) sorted[k] = r->tensors[key[k].i];
    memcpy(r->tensors, sorted, n * sizeof *sorted);
    free(key);
    free(walk);
    free(sorted);
    return DCK_OK;
}

/* ------------------------------------------------------------------ opening a path */

/* Failures name the path (the user gave two; say which one is bad). */
static dck_status name_path(dck_status s, const char *path) {
    const char *m = dck_last_error();
    if (m && *m && strstr(m, path)) return s;
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", m && *m ? m : dck_strerror(s));
    return dck_set_error(s, "%s: %s", path, msg);
}

dck_status dck_diff_side_open(const char *path, const dck_options *open_opt, int threads, side *sd) {
    memset(sd, 0, sizeof *sd);
    sd->label = path;
    dck_clear_error();
    dck_options o;
    if (open_opt) o = *open_opt;
    else dck_options_init(&o);
    o.threads = threads;
    o.hash_files = 0;
    o.progress = NULL;
    o.progress_ctx = NULL;
    const char *paths[1] = {path};
    if (dck_manifest_sniff(path)) {
        dck_manifest *m = NULL;
        dck_status s = dck_manifest_load(path, &m);
        if (!s) {
            sd->m = m;
            return DCK_OK;
        }
        /* A text-looking file that some reader takes is a checkpoint after
         * all; otherwise the manifest's complaint is the useful one. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dck_last_error());
        if (dck_checkpoint_open(paths, 1, &o, &sd->ck) == DCK_OK) return DCK_OK;
        dck_set_error(s, "%s", msg);
        return name_path(s, path);
    }
    dck_status s = dck_checkpoint_open(paths, 1, &o, &sd->ck);
    return s ? name_path(s, path) : DCK_OK;
}

void dck_diff_side_close(side *sd) {
    dck_checkpoint_free(sd->ck);
    dck_manifest_free((dck_manifest *)sd->m);
    sd->ck = NULL;
    sd->m = NULL;
}

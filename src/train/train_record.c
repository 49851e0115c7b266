/* Reading the tensor digests a recorded run holds (train_record.h), and
 * finding the first step and tensor where two recordings part. */
#include "train/train_record.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char MAGIC[8] = {'D', 'C', 'K', 'T', 'D', 'I', 'G', 0};
enum { REC_NAME = 1, REC_STEP = 2 };
/* a side file is read whole: bounded so hostile sizes fail cleanly */
#define DCK_RECORD_MAX_BYTES ((uint64_t)1 << 34)

const char *dck_rec_kind_name(dck_rec_kind k) {
    static const char *const n[DCK_REC_KIND_COUNT] = {"gradient", "parameter", "optimizer state"};
    return (unsigned)k < DCK_REC_KIND_COUNT ? n[k] : "?";
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

void dck_recording_release(dck_recording *r) {
    if (!r) return;
    for (size_t i = 0; i < r->nnames; i++) free(r->names[i]);
    free(r->names);
    free(r->kinds);
    free(r->steps);
    free(r->entries);
    memset(r, 0, sizeof *r);
}

static dck_status read_all(const char *path, uint8_t **data, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return dck_set_error(DCK_ERR_IO, "%s: %s", path, strerror(errno));
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    dck_status s = DCK_OK;
    for (;;) {
        if (n + 65536 > cap && (s = dck_grow((void **)&buf, &cap, n + 65536, 1))) break;
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n > DCK_RECORD_MAX_BYTES) {
            s = dck_set_error(DCK_ERR_LIMIT, "%s: larger than %llu GiB", path,
                              (unsigned long long)(DCK_RECORD_MAX_BYTES >> 30));
            break;
        }
        if (got == 0) {
            if (ferror(f)) s = dck_set_error(DCK_ERR_IO, "%s: cannot read", path);
            break;
        }
    }
    fclose(f);
    if (s) {
        free(buf);
        return s;
    }
    *data = buf;
    *len = n;
    return DCK_OK;
}

static dck_status parse(const char *path, const uint8_t *d, size_t len, dck_recording *r) {
    size_t cap_names = 0, cap_kinds = 0, cap_steps = 0, cap_entries = 0;
    if (len < 16 || memcmp(d, MAGIC, 8) != 0)
        return dck_set_error(DCK_ERR_FORMAT, "%s: not a detcheck tensor digest file (no DCKTDIG header)", path);
    uint32_t ver = (uint32_t)le(d + 8, 4);
    if (ver != DCK_RECORD_VERSION)
        return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: version %u (this detcheck reads %d)", path, ver,
                             DCK_RECORD_VERSION);
    size_t pos = 16;
    while (pos < len) {
        uint8_t type = d[pos];
        if (type == REC_NAME) {
            if (len - pos < 8) break; /* torn */
            uint32_t id = (uint32_t)le(d + pos + 1, 4);
            uint8_t kind = d[pos + 5];
            size_t nl = (size_t)le(d + pos + 6, 2);
            if (len - pos - 8 < nl) break;
            if (id != r->nnames || kind >= DCK_REC_KIND_COUNT)
                return dck_set_error(DCK_ERR_FORMAT, "%s: byte %zu: name record with id %u kind %u (expected id %zu)",
                                     path, pos, id, kind, r->nnames);
            DCK_TRY(dck_grow((void **)&r->names, &cap_names, r->nnames + 1, sizeof *r->names));
            DCK_TRY(dck_grow((void **)&r->kinds, &cap_kinds, r->nnames + 1, 1));
            if (!(r->names[r->nnames] = dck_strndup((const char *)d + pos + 8, nl))) return dck_oom(NULL);
            r->kinds[r->nnames++] = kind;
            pos += 8 + nl;
        } else if (type == REC_STEP) {
            if (len - pos < 13) break;
            long step = (long)(int64_t)le(d + pos + 1, 8);
            uint64_t cnt = le(d + pos + 9, 4);
            if ((len - pos - 13) / 20 < cnt) break;
            if (r->nsteps && step <= r->steps[r->nsteps - 1].step)
                return dck_set_error(DCK_ERR_FORMAT, "%s: byte %zu: step %ld after step %ld", path, pos, step,
                                     r->steps[r->nsteps - 1].step);
            DCK_TRY(dck_grow((void **)&r->steps, &cap_steps, r->nsteps + 1, sizeof *r->steps));
            DCK_TRY(dck_grow((void **)&r->entries, &cap_entries, r->nentries + (size_t)cnt, sizeof *r->entries));
            r->steps[r->nsteps++] = (dck_rec_step){step, (size_t)cnt, r->nentries};
            for (uint64_t k = 0; k < cnt; k++) {
                const uint8_t *e = d + pos + 13 + 20 * k;
                dck_rec_entry *x = &r->entries[r->nentries++];
                x->id = (uint32_t)le(e, 4);
                if (x->id >= r->nnames)
                    return dck_set_error(DCK_ERR_FORMAT, "%s: byte %zu: step %ld uses tensor id %u, never named",
                                         path, pos, step, x->id);
                x->digest.high64 = le(e + 4, 8);
                x->digest.low64 = le(e + 12, 8);
            }
            pos += 13 + 20 * (size_t)cnt;
        } else {
            return dck_set_error(DCK_ERR_FORMAT, "%s: byte %zu: unknown record type %u", path, pos, type);
        }
    }
    return DCK_OK;
}

dck_status dck_recording_load(const char *path, dck_recording *out) {
    memset(out, 0, sizeof *out);
    uint8_t *data = NULL;
    size_t len = 0;
    DCK_TRY(read_all(path, &data, &len));
    dck_status s = parse(path, data, len, out);
    free(data);
    if (s) dck_recording_release(out);
    return s;
}

/* sorting the entries of one step: kind, then model order */
static const dck_recording *sort_rec;

static int entry_cmp(const void *x, const void *y) {
    const dck_rec_entry *a = x, *b = y;
    int ka = sort_rec->kinds[a->id], kb = sort_rec->kinds[b->id];
    if (ka != kb) return ka - kb;
    return dck_name_compare(sort_rec->names[a->id], sort_rec->names[b->id]);
}

static dck_rec_entry *sorted_step(const dck_recording *r, const dck_rec_step *st) {
    dck_rec_entry *v = malloc((st->n ? st->n : 1) * sizeof *v);
    if (!v) return NULL;
    memcpy(v, r->entries + st->first, st->n * sizeof *v);
    sort_rec = r; /* bisect is single-threaded */
    qsort(v, st->n, sizeof *v, entry_cmp);
    return v;
}

size_t dck_recording_common_steps(const dck_recording *a, const dck_recording *b) {
    size_t n = 0;
    for (size_t i = 0, j = 0; i < a->nsteps && j < b->nsteps;) {
        if (a->steps[i].step < b->steps[j].step) i++;
        else if (b->steps[j].step < a->steps[i].step) j++;
        else n++, i++, j++;
    }
    return n;
}

int dck_recording_compare(const dck_recording *a, const dck_recording *b, long *step, int *kind,
                          char *name, size_t nlen, const char **how) {
    for (size_t i = 0, j = 0; i < a->nsteps && j < b->nsteps;) {
        if (a->steps[i].step < b->steps[j].step) {
            i++;
            continue;
        }
        if (b->steps[j].step < a->steps[i].step) {
            j++;
            continue;
        }
        dck_rec_entry *x = sorted_step(a, &a->steps[i]), *y = sorted_step(b, &b->steps[j]);
        if (!x || !y) {
            free(x);
            free(y);
            return -1;
        }
        size_t p = 0, q = 0, nx = a->steps[i].n, ny = b->steps[j].n;
        int found = 0;
        while ((p < nx || q < ny) && !found) {
            int c;
            if (p == nx) c = 1;
            else if (q == ny) c = -1;
            else {
                c = (int)a->kinds[x[p].id] - (int)b->kinds[y[q].id];
                if (!c) c = strcmp(a->names[x[p].id], b->names[y[q].id]) ? dck_name_compare(a->names[x[p].id], b->names[y[q].id]) : 0;
            }
            const char *nm = NULL;
            if (c < 0) {
                nm = a->names[x[p].id];
                *kind = a->kinds[x[p].id];
                *how = "only in A";
            } else if (c > 0) {
                nm = b->names[y[q].id];
                *kind = b->kinds[y[q].id];
                *how = "only in B";
            } else if (!dck_digest_equal(x[p].digest, y[q].digest)) {
                nm = a->names[x[p].id];
                *kind = a->kinds[x[p].id];
                *how = "digest";
            } else {
                p++;
                q++;
                continue;
            }
            snprintf(name, nlen, "%s", nm);
            *step = a->steps[i].step;
            found = 1;
        }
        free(x);
        free(y);
        if (found) return 1;
        i++;
        j++;
    }
    return 0;
}

/* Hugging Face index files (model.safetensors.index.json): a weight_map
 * from tensor names to shard files, read by the JSON scanner of
 * common/json_scan.h (formats.h: dck_index_open). */
#include "formats/formats.h"
#include "common/json_scan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_INDEX_BYTES ((size_t)1 << 30)

static int cmp_cstr(const void *a, const void *b) {
    return dck_name_compare(*(char *const *)a, *(char *const *)b);
}

/* The whole file, NUL-terminated. */
static dck_status read_text_file(const char *path, size_t limit, char **out, size_t *len) {
    *out = NULL;
    int fd;
    struct stat st;
    DCK_TRY(dck_open_regular(path, &fd, &st)); /* a FIFO would block */
    dck_status s = DCK_OK;
    char *buf = NULL;
    size_t n = 0;
    if ((uint64_t)st.st_size > limit) {
        s = dck_set_error(DCK_ERR_LIMIT, "%s: %llu bytes, over the %zu-byte limit", path,
                          (unsigned long long)st.st_size, limit);
    } else if (!(buf = malloc((size_t)st.st_size + 1))) {
        s = dck_oom(NULL);
    } else {
        while (n < (size_t)st.st_size) {
            ssize_t r = read(fd, buf + n, (size_t)st.st_size - n);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                s = dck_set_error(DCK_ERR_IO, "%s: read error: %s", path, strerror(errno));
                break;
            }
            if (r == 0) break;
            n += (size_t)r;
        }
    }
    close(fd);
    if (s) {
        free(buf);
        return s;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return DCK_OK;
}

typedef struct {
    const char *tensor, *file; /* file NULL: not a string */
    uint32_t at;
} idx_entry;

/* The shards' tensors (ck->tensors[before, ntensors)) in the weight_map's
 * order as written, when it has one: transformers writes the map with its
 * keys sorted (json.dumps(sort_keys=True): "h.10" before "h.2"), which says
 * nothing of the model, and a map in byte order is taken for such; other
 * writers' maps keep the order they list. Tensors of a shard the map does
 * not name come after, in their shard's order. */
static void weight_map_order(dck_checkpoint *ck, size_t before, const idx_entry *wm, size_t nwm) {
    bool sorted = true;
    for (size_t i = 1; i < nwm && sorted; i++) sorted = strcmp(wm[i - 1].tensor, wm[i].tensor) < 0;
    if (sorted) return;
    if (before >= ck->ntensors) return;
    /* the shards' tensors hold seq base .. base+n-1 (added in turn, none
     * since), the named ones are distinct (found at or after before): the
     * same numbers, given out anew */
    uint64_t base = ck->tensors[before].seq, next = base + nwm;
    for (size_t i = before; i < ck->ntensors; i++) ck->tensors[i].ordered = false;
    for (size_t i = 0; i < nwm; i++) {
        dck_tensor_entry *t = &ck->tensors[dck_checkpoint_find(ck, wm[i].tensor)];
        t->seq = base + i;
        t->ordered = true;
    }
    for (size_t i = before; i < ck->ntensors; i++)
        if (!ck->tensors[i].ordered) ck->tensors[i].seq = next++;
    dck_ck_mark_ordered(ck, before);
}

/* Opens the shards named in an index's weight_map (each once), relative to
 * the index's directory, through open_shard (open.c: by content, so .bin
 * shards as well as safetensors). Tensors must come from the shard the
 * index names. */
dck_status dck_index_open(dck_checkpoint *ck, const char *index_path, const char *dir,
                          const char *relprefix, dck_index_shard_fn open_shard, void *ctx) {
    char *text;
    size_t len = 0;
    DCK_TRY(read_text_file(index_path, MAX_INDEX_BYTES, &text, &len));
    dck_json js;
    dck_status s = dck_json_init(&js, text, len, false);
    if (s) {
        free(text);
        return s;
    }
    idx_entry *wm = NULL;
    size_t nwm = 0, cap = 0;
    const char **files = NULL;
    bool have_wm = false;
    int r = 0;
    dck_json_ws(&js);
    if (dck_json_at(&js, '{')) {
        dck_json_obj top;
        dck_json_obj_open(&js, &top, false);
        const char *k;
        size_t kl;
        while (!r && (r = dck_json_obj_next(&js, &top, &k, &kl)) == 1) {
            r = 0;
            if (strcmp(k, "weight_map") || !dck_json_at(&js, '{')) {
                r = dck_json_skip(&js, 2);
                continue;
            }
            have_wm = true;
            dck_json_obj o;
            dck_json_obj_open(&js, &o, true);
            uint32_t wm_id = o.id;
            const char *t;
            size_t tl;
            for (;;) {
                const unsigned char *kat = js.p;
                if ((r = dck_json_obj_next(&js, &o, &t, &tl)) != 1) break;
                if (dck_grow((void **)&wm, &cap, nwm + 1, sizeof *wm)) {
                    js.oom = true;
                    r = dck_json_fail(&js, "out of memory");
                    break;
                }
                idx_entry *e = &wm[nwm++];
                e->tensor = t;
                e->file = NULL;
                e->at = (uint32_t)(kat - js.start);
                size_t fl;
                r = dck_json_at(&js, '"') ? dck_json_string(&js, false, &e->file, &fl) : dck_json_skip(&js, 3);
                if (r) break;
            }
            if (!r && nwm) r = dck_json_dedupe(&js, wm_id, &wm[0].tensor, sizeof *wm, &wm[0].at, sizeof *wm, nwm);
        }
        if (!r) r = dck_json_finish(&js);
    } else if (dck_json_at(&js, '[')) {
        r = dck_json_skip(&js, 1);
        if (!r) r = dck_json_finish(&js);
    } else {
        r = dck_json_fail(&js, "'[' or '{' expected");
    }
    if (r) {
        if (js.oom) {
            s = dck_oom(NULL);
        } else {
            int line = 1;
            for (size_t i = 0; i < js.err_at && i < len; i++) line += text[i] == '\n';
            s = dck_set_error(DCK_ERR_FORMAT, "%s: invalid JSON at line %d (byte %zu): %s",
                              index_path, line, js.err_at, js.err);
        }
        goto done;
    }
    if (!have_wm) {
        s = dck_set_error(DCK_ERR_FORMAT, "%s: no weight_map object", index_path);
        goto done;
    }
    files = malloc((nwm + 1) * sizeof *files);
    if (!files) {
        s = dck_oom(NULL);
        goto done;
    }
    /* each shard once (the scanner's table finds the repeats), in model order */
    uint32_t files_id = ++js.nobj;
    size_t nf = 0;
    const char *last = NULL;
    for (size_t i = 0; i < nwm; i++) {
        const char *fn = wm[i].file;
        if (!fn || !*fn || fn[0] == '/' || strstr(fn, "..")) {
            s = dck_set_error(DCK_ERR_FORMAT, "%s: weight_map entry of %s is not a relative file name",
                              index_path, wm[i].tensor);
            goto done;
        }
        if (last && !strcmp(fn, last)) continue; /* the usual run of one shard's tensors */
        last = fn;
        int r2 = dck_json_slots_reserve(&js, 1) ? -1
                                                 : dck_json_slot_insert(&js, files_id, fn, (uint32_t)strlen(fn), 0);
        if (r2 < 0) {
            s = dck_oom(NULL);
            goto done;
        }
        if (r2) files[nf++] = fn;
    }
    dck_qsort(files, nf, sizeof *files, cmp_cstr);
    size_t before = ck->ntensors;
    for (size_t i = 0; i < nf && !s; i++) {
        char *p = dck_path_join(dir, files[i]);
        char *rp = dck_path_join(relprefix, files[i]);
        if (!p || !rp) s = dck_oom(NULL);
        else s = open_shard(ctx, ck, p, rp, files[i]);
        free(p);
        free(rp);
    }
    /* every tensor the index names must exist (the checkpoint's name index
     * finds it; tensors of other paths opened before do not count) */
    for (size_t i = 0; i < nwm && !s; i++) {
        long at = dck_checkpoint_find(ck, wm[i].tensor);
        if (at < 0 || (size_t)at < before)
            s = dck_set_error(DCK_ERR_FORMAT, "%s: tensor %s is in the index but in no shard",
                              index_path, wm[i].tensor);
    }
    if (!s) weight_map_order(ck, before, wm, nwm);
done:
    free(files);
    free(wm);
    dck_json_free(&js);
    free(text);
    return s;
}

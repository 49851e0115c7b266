/* Opening paths: the only place that names the individual readers. A path
 * is a file (sniffed by its first bytes, decompressed when zstd) or a
 * directory (a reader that takes the whole directory, else each regular
 * file in name order). Adding a format is one file plus one row of
 * DCK_READERS below. */
#include "formats/formats.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reader table: one row per format, tried in this order on each path
 * (the index reader before safetensors, directory readers before the
 * per-file ones). Each row X(NAME) names `const dck_reader dck_reader_NAME`,
 * defined in the format's own file. */
#define DCK_READERS(X)                                                                             \
    X(index)       /* *.index.json: shards by content (below) */                                  \
    X(safetensors) /* safetensors, detcheck's sharded layout */                                   \
    X(deepspeed)   /* DeepSpeed ZeRO and universal checkpoints (before megatron: */             \
                   /* Megatron-DeepSpeed roots also hold its latest file) */                      \
    X(megatron)    /* Megatron-LM checkpoint roots and iter_N dirs */                             \
    X(dcp)         /* torch.distributed.checkpoint directories */                                 \
    X(npz)         /* NumPy .npz */                                                               \
    X(pt)          /* torch.save: zip, legacy, tar */                                             \
    X(npy)         /* NumPy .npy */

#define DCK_READER_EXTERN(name) extern const dck_reader dck_reader_##name;
#define DCK_READER_ROW(name) &dck_reader_##name,
DCK_READERS(DCK_READER_EXTERN)
static const dck_reader *const readers[] = {DCK_READERS(DCK_READER_ROW)};

/* ------------------------------------------------------------------ open */

/* dck_checkpoint_open is public: every failure leaves a message. A reader's
 * status that came without one gets the path, the reader and the status. */
static dck_status reader_open(const dck_reader *r, dck_checkpoint *ck, const char *path,
                              const char *relpath) {
    dck_clear_error();
    dck_status s = r->open(ck, path, relpath);
    if (s && !*dck_last_error())
        return dck_set_error(s, "%s: %s reader: %s", path, r->name, dck_strerror(s));
    return s;
}

/* Readers that can also take a file this scan has opened and sniffed, so
 * that each file of a directory of thousands is opened once. A row names a
 * reader of DCK_READERS and its function, defined in the reader's file. */
dck_status dck_safetensors_open_opened(dck_checkpoint *ck, dck_file *f, const uint8_t *head, size_t nhead);
static const struct {
    const dck_reader *reader;
    dck_status (*open_opened)(dck_checkpoint *ck, dck_file *f, const uint8_t *head, size_t nhead);
} opened_readers[] = {
    {&dck_reader_safetensors, dck_safetensors_open_opened},
};

/* What the sniffing read holds: enough for most safetensors headers. The
 * probes see the first 64 bytes. */
#define HEAD_BYTES 4096
#define PROBE_BYTES 64

/* Hands the sniffed file to reader r: directly when it takes open files,
 * else by path (f is closed first). */
static dck_status reader_open_sniffed(const dck_reader *r, dck_checkpoint *ck, dck_file *f, const char *path,
                                      const char *relpath, const uint8_t *head, size_t got) {
    for (size_t i = 0; i < sizeof opened_readers / sizeof opened_readers[0]; i++)
        if (opened_readers[i].reader == r) {
            dck_clear_error();
            dck_status s = opened_readers[i].open_opened(ck, f, head, got);
            if (s && !*dck_last_error())
                return dck_set_error(s, "%s: %s reader: %s", path, r->name, dck_strerror(s));
            return s;
        }
    dck_file_close(f);
    return reader_open(r, ck, path, relpath);
}

/* Opens a file and reads its first decompressed bytes, for the probes. */
static dck_status sniff(const char *path, const char *relpath, dck_file **f, uint8_t *head, size_t *got) {
    return dck_file_open_prefix(path, relpath, head, HEAD_BYTES, got, f);
}

static dck_status open_file_path(dck_checkpoint *ck, const char *path, const char *relpath) {
    uint8_t head[HEAD_BYTES];
    size_t got = 0;
    dck_file *f;
    DCK_TRY(sniff(path, relpath, &f, head, &got));
    size_t np = got < PROBE_BYTES ? got : PROBE_BYTES;
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++)
        if (readers[i]->probe(path, false, head, np))
            return reader_open_sniffed(readers[i], ck, f, path, relpath, head, got);
    dck_file_close(f);
    return dck_set_error(DCK_ERR_UNSUPPORTED, "%s: not a checkpoint format detcheck reads", path);
}

/* Names that say "checkpoint file": in a directory, such a file that no
 * reader takes (a shard whose header was zeroed or cut short) is an error,
 * never skipped, or the manifest would silently lack its tensors. Each
 * suffix also counts with .zst after it. */
static const char *const checkpoint_suffixes[] = {
    ".safetensors", ".pt", ".pth", ".bin", ".ckpt", ".npy", ".npz", ".distcp",
};

static int checkpoint_name(const char *name) {
    size_t l = strlen(name);
    char base[4096];
    if (l >= sizeof base) return 0;
    memcpy(base, name, l + 1);
    if (dck_has_suffix(base, ".zst")) base[l - 4] = 0;
    for (size_t i = 0; i < sizeof checkpoint_suffixes / sizeof checkpoint_suffixes[0]; i++)
        if (dck_has_suffix(base, checkpoint_suffixes[i])) return 1;
    return 0;
}

/* Magic numbers of the formats (zstd is unwrapped before this sees them):
 * zip (.pt, .npz), NumPy, a safetensors length prefix is checked apart. */
static int checkpoint_magic(const uint8_t *h, size_t n) {
    static const struct {
        const char *magic;
        size_t len;
    } magics[] = {{"PK\x03\x04", 4}, {"\x93NUMPY", 6}, {"\x80\x02\x8a\x0a", 4}};
    for (size_t i = 0; i < sizeof magics / sizeof magics[0]; i++)
        if (n >= magics[i].len && !memcmp(h, magics[i].magic, magics[i].len)) return 1;
    return 0;
}

static void notice(const dck_checkpoint *ck, const char *fmt, const char *a, const char *b) {
    if (!ck->opt.notice) return;
    char msg[DCK_ERROR_MESSAGE_MAX];
    snprintf(msg, sizeof msg, fmt, a, b);
    ck->opt.notice(ck->opt.notice_ctx, msg);
}

static int cmp_str(const void *a, const void *b) {
    return dck_name_compare(*(char *const *)a, *(char *const *)b);
}

/* ------------------------------------------------------------------ index files
 * *.index.json (transformers' model.safetensors.index.json and
 * pytorch_model.bin.index.json, any other weight_map): the shards it names
 * are opened by content like every other file, so .bin shards too. */

static dck_status open_file_path(dck_checkpoint *ck, const char *path, const char *relpath);

typedef struct {
    char **names; /* the directory's sorted names, or NULL (an index given as a path) */
    size_t n;
    unsigned char *taken; /* per name: read through an index */
} shard_ctx;

static dck_status open_shard(void *vctx, dck_checkpoint *ck, const char *path, const char *relpath,
                             const char *name) {
    shard_ctx *c = vctx;
    if (dck_has_suffix(name, ".index.json")) /* an index of indexes could loop */
        return dck_set_error(DCK_ERR_FORMAT, "%s: shard %s is an index file", path, name);
    if (c && c->names) {
        char **at = bsearch(&name, c->names, c->n, sizeof *c->names, cmp_str);
        if (at) c->taken[at - c->names] = 1;
    }
    return open_file_path(ck, path, relpath);
}

static int idx_probe(const char *path, bool is_dir, const uint8_t *head, size_t nhead) {
    (void)head;
    (void)nhead;
    return !is_dir && dck_has_suffix(path, ".index.json");
}

static dck_status idx_open(dck_checkpoint *ck, const char *path, const char *relpath) {
    (void)relpath;
    char *dir = dck_strdup(path);
    if (!dir) return dck_oom(NULL);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");
    dck_status s = dck_index_open(ck, path, dir, "", open_shard, NULL);
    free(dir);
    return s;
}

/* Directories are taken by open_dir, which reads their index files itself. */
const dck_reader dck_reader_index = {"index", idx_probe, idx_open, NULL, 0};

/* ------------------------------------------------------------------ directories */

/* Hugging Face snapshots may hold the same weights twice, as safetensors and
 * as torch.save .bin files: like transformers, detcheck reads the
 * safetensors and skips the .bin ones' tensors (with a note that says they
 * were not compared: nothing checks that the two hold the same weights).
 * Their bytes are still files of the folder: under hash_files they join the
 * checkpoint as files without tensors, so the whole-file hashes (verify
 * --files) see a damaged or deleted .bin. A row: the stem of the
 * safetensors files, the stem of the .bin files. */
static const struct {
    const char *st, *bin;
} weight_pairs[] = {
    {"model", "pytorch_model"},
    {"adapter_model", "adapter_model"},
};

/* Is name one of stem.EXT, stem.EXT.index.json, stem-N-of-M.EXT? */
static int weight_file_of(const char *name, const char *stem, const char *ext) {
    size_t sl = strlen(stem), el = strlen(ext), n = strlen(name);
    if (strncmp(name, stem, sl)) return 0;
    const char *r = name + sl;
    if (*r == '.' && !strcmp(r + 1, ext)) return 1;
    if (*r == '.' && !strncmp(r + 1, ext, el) && !strcmp(r + 1 + el, ".index.json")) return 1;
    if (*r != '-' || n < sl + el + 2 || strcmp(name + n - el, ext) || name[n - el - 1] != '.') return 0;
    unsigned a, b;
    int used = 0;
    return sscanf(r, "-%u-of-%u.%n", &a, &b, &used) == 2 && used && !strcmp(r + used, ext);
}

/* Which .bin weight files a directory's safetensors make redundant. */
static const char *redundant_bin(char **names, size_t n, const char *name) {
    for (size_t k = 0; k < sizeof weight_pairs / sizeof weight_pairs[0]; k++) {
        if (!weight_file_of(name, weight_pairs[k].bin, "bin")) continue;
        for (size_t i = 0; i < n; i++)
            if (weight_file_of(names[i], weight_pairs[k].st, "safetensors")) return names[i];
    }
    return NULL;
}

/* The d_type byte stored after a name of open_dir's list. */
static unsigned char dir_entry_type(const char *name) {
    return (unsigned char)name[strlen(name) + 1];
}

/* Is name of directory dir a regular file (a link: what it names)? The
 * directory says which without a stat, unless its file system does not
 * tell. *joined: dir/name (malloc'd; NULL when out of memory). */
static bool dir_entry_regular(const char *dir, const char *name, char **joined) {
    unsigned char type = dir_entry_type(name);
    char *p = dck_path_join(dir, name);
    struct stat stt;
    *joined = p;
    return type == DT_REG ||
           ((type == DT_UNKNOWN || type == DT_LNK) && p && stat(p, &stt) == 0 && S_ISREG(stt.st_mode));
}

/* A directory's files are read in units: an index file with its shards, or
 * one file. */
typedef struct {
    size_t name;    /* index into names */
    int is_index;
} dir_unit;

typedef struct {
    const char *path;
    char **names;
    size_t n;
    unsigned char *skip;  /* per name: not read (note given) */
    unsigned char *taken; /* per name: read through an index */
    dir_unit *units;
    size_t nunits;
    size_t opened; /* files a reader took */
} dir_scan;

static dck_status load_unit(dck_checkpoint *ck, dir_scan *d, const dir_unit *u) {
    const char *nm = d->names[u->name];
    char *p = dck_path_join(d->path, nm);
    if (!p) return dck_oom(NULL);
    dck_status s = DCK_OK;
    if (u->is_index) {
        shard_ctx c = {d->names, d->n, d->taken};
        s = dck_index_open(ck, p, d->path, "", open_shard, &c);
        d->opened++;
        free(p);
        return s;
    }
    uint8_t head[HEAD_BYTES];
    size_t got = 0;
    dck_file *f = NULL;
    s = sniff(p, nm, &f, head, &got);
    size_t np = got < PROBE_BYTES ? got : PROBE_BYTES;
    for (size_t r = 0; !s && r < sizeof readers / sizeof readers[0]; r++)
        if (readers[r]->in_directories && readers[r]->probe(p, false, head, np)) {
            s = reader_open_sniffed(readers[r], ck, f, p, nm, head, got);
            f = NULL;
            d->opened++;
            break;
        }
    if (!s && f) {
        /* no reader took it: an error when it looks like a checkpoint
         * file, else a note */
        if (checkpoint_name(nm) || checkpoint_magic(head, got) || f->zstd)
            s = dck_set_error(DCK_ERR_FORMAT,
                              "%s: looks like a checkpoint file (by its %s) but no reader "
                              "takes it (damaged header?)",
                              p, checkpoint_name(nm) ? "name" : "first bytes");
        else
            notice(ck, "%s: skipped (%s)", p, "not a checkpoint file");
    }
    dck_file_close(f);
    free(p);
    return s;
}

/* Names two files of the directory both hold: a value, or a tensor that
 * one of them holds whole (pieces of detcheck's sharded layout, which
 * complete each other, are no collision). */
typedef struct {
    const char *name;
    size_t unit;
    int whole; /* tensor held whole; values count as whole */
} owned_name;

static int cmp_owned(const void *a, const void *b) {
    const owned_name *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->unit < y->unit ? -1 : x->unit > y->unit);
}

static int whole_piece(const dck_tensor_entry *t, const dck_piece *p) {
    for (int i = 0; i < t->info.ndim; i++)
        if (p->offset[i] || p->shape[i] != t->info.shape[i]) return 0;
    return 1;
}

/* Marks in hit[] the units whose names collide with another unit's. */
static dck_status find_collisions(dck_checkpoint *const *cks, size_t nunits, unsigned char *hit, size_t *nhit) {
    size_t n = 0;
    for (size_t u = 0; u < nunits; u++) n += cks[u] ? cks[u]->ntensors + cks[u]->nvalues : 0;
    owned_name *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return dck_oom(NULL);
    n = 0;
    for (size_t u = 0; u < nunits; u++) {
        if (!cks[u]) continue;
        for (size_t i = 0; i < cks[u]->ntensors; i++) {
            const dck_tensor_entry *t = &cks[u]->tensors[i];
            int whole = 0;
            for (size_t p = 0; p < t->npieces && !whole; p++) whole = whole_piece(t, &t->pieces[p]);
            v[n++] = (owned_name){t->info.name, u, whole};
        }
        for (size_t i = 0; i < cks[u]->nvalues; i++) v[n++] = (owned_name){cks[u]->values[i].name, u, 1};
    }
    qsort(v, n, sizeof *v, cmp_owned);
    *nhit = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        int whole = v[i].whole, units = 1;
        for (; j < n && !strcmp(v[j].name, v[i].name); j++) {
            whole |= v[j].whole;
            units += v[j].unit != v[j - 1].unit;
        }
        if (units > 1 && whole)
            for (size_t k = i; k < j; k++)
                if (!hit[v[k].unit]) hit[v[k].unit] = 1, (*nhit)++;
        i = j;
    }
    free(v);
    return DCK_OK;
}

/* The namespace of a file: its name without .zst, .index.json and its last
 * extension ("optim.pt" -> "optim", "pytorch_model.bin.index.json" ->
 * "pytorch_model"). */
static void file_stem(const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s", name);
    size_t l = strlen(out);
    if (dck_has_suffix(out, ".zst")) out[l -= 4] = 0;
    if (dck_has_suffix(out, ".index.json")) out[l -= 11] = 0;
    char *dot = strrchr(out, '.');
    if (dot && dot != out) *dot = 0;
}

/* Reads every unit into a checkpoint of its own, then moves them into ck,
 * each unit whose names collide with another's under its file's stem. */
static dck_status open_dir_namespaced(dck_checkpoint *ck, dir_scan *d, bool noted) {
    /* the first pass gave its notes (files skipped) when it read every file */
    dck_options uo = ck->opt;
    if (noted) uo.notice = NULL;
    dck_checkpoint **cks = calloc(d->nunits ? d->nunits : 1, sizeof *cks);
    unsigned char *hit = calloc(d->nunits ? d->nunits : 1, 1);
    dck_status s = cks && hit ? DCK_OK : dck_oom(NULL);
    size_t nhit = 0, u = 0;
    memset(d->taken, 0, d->n);
    d->opened = 0;
    for (; u < d->nunits && !s; u++) {
        if (d->taken[d->units[u].name]) continue;
        if (!(s = dck_ck_create(&uo, &cks[u]))) s = load_unit(cks[u], d, &d->units[u]);
    }
    if (!s) s = find_collisions(cks, d->nunits, hit, &nhit);
    for (u = 0; u < d->nunits && !s; u++) {
        if (!cks[u]) continue;
        char stem[512], msg[DCK_ERROR_MESSAGE_MAX];
        file_stem(d->names[d->units[u].name], stem, sizeof stem - 1);
        if (hit[u]) {
            strcat(stem, ".");
            snprintf(msg, sizeof msg, "%s/%s: its names are read as %s* (another file of the folder holds the same names)",
                     d->path, d->names[d->units[u].name], stem);
            if (ck->opt.notice) ck->opt.notice(ck->opt.notice_ctx, msg);
        }
        s = dck_ck_move(ck, cks[u], hit[u] ? stem : NULL);
        cks[u] = NULL;
    }
    for (u = 0; cks && u < d->nunits; u++) dck_checkpoint_free(cks[u]);
    free(cks);
    free(hit);
    return s;
}

static int cmp_value_at(const void *a, const void *b, void *ctx) {
    const dck_checkpoint *ck = ctx;
    return strcmp(ck->values[*(const size_t *)a].name, ck->values[*(const size_t *)b].name);
}

/* Do two files of what was just read share a name (a value, or a tensor one
 * of them holds whole)? Then the directory is read again, namespaced. */
static int names_collide(const dck_checkpoint *ck) {
    for (size_t i = 0; i < ck->ntensors; i++) {
        const dck_tensor_entry *t = &ck->tensors[i];
        if (t->npieces < 2) continue;
        int files = 0, whole = 0;
        for (size_t p = 0; p < t->npieces; p++) {
            files |= t->pieces[p].file != t->pieces[0].file;
            whole |= whole_piece(t, &t->pieces[p]);
        }
        if (files && whole) return 1;
    }
    if (ck->nvalues < 2) return 0;
    size_t *ix = malloc(ck->nvalues * sizeof *ix);
    if (!ix) return 1; /* the namespaced pass finds out */
    for (size_t i = 0; i < ck->nvalues; i++) ix[i] = i;
    qsort_r(ix, ck->nvalues, sizeof *ix, cmp_value_at, (void *)ck);
    int hit = 0;
    for (size_t i = 1; i < ck->nvalues && !hit; i++)
        hit = !strcmp(ck->values[ix[i - 1]].name, ck->values[ix[i]].name) &&
              ck->value_files[ix[i - 1]] != ck->value_files[ix[i]];
    free(ix);
    return hit;
}

/* A seal (detcheck-seal(1)) and its writer's temporaries are no part of the
 * checkpoint: DIR/detcheck-seal.yaml, and FILE.detcheck-seal.yaml beside
 * each sealed file of a directory. Readers never see them, so a checkpoint
 * hashes the same with and without its seal. */
static bool is_seal_name(const char *name) {
    const char *at = strstr(name, DCK_SEAL_NAME);
    if (!at || (at > name && at[-1] != '.')) return false;
    at += sizeof DCK_SEAL_NAME - 1;
    return !*at || !strncmp(at, ".tmp.", 5);
}

static dck_status open_dir(dck_checkpoint *ck, const char *path) {
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++)
        if (readers[i]->probe(path, true, NULL, 0)) return reader_open(readers[i], ck, path, "");
    DIR *dd = opendir(path);
    if (!dd) return dck_set_error(DCK_ERR_IO, "%s: cannot open directory: %s", path, strerror(errno));
    /* names (each followed by its d_type byte), in model order */
    char **names = NULL;
    size_t n = 0, cap = 0;
    dck_status s = DCK_OK;
    struct dirent *e;
    while ((e = readdir(dd))) {
        if (e->d_name[0] == '.' || is_seal_name(e->d_name)) continue;
        if ((s = dck_grow((void **)&names, &cap, n + 1, sizeof *names))) break;
        size_t l = strlen(e->d_name);
        if (!(names[n] = malloc(l + 2))) {
            s = dck_oom(NULL);
            break;
        }
        memcpy(names[n], e->d_name, l + 1);
        names[n][l + 1] = (char)e->d_type;
        n++;
    }
    closedir(dd);
    if (!s) dck_qsort(names, n, sizeof *names, cmp_str);
    dir_scan d = {path, names, n, calloc(n ? n : 1, 1), calloc(n ? n : 1, 1), calloc(n ? n : 1, sizeof(dir_unit)), 0, 0};
    if (!s && (!d.skip || !d.taken || !d.units)) s = dck_oom(NULL);
    /* the units: index files first (their shards are not read again), then
     * the regular files; .bin weights that safetensors duplicate skipped */
    for (int pass = 0; pass < 2 && !s; pass++)
        for (size_t i = 0; i < n && !s; i++) {
            int is_index = dck_has_suffix(names[i], ".index.json");
            if (is_index != (pass == 0)) continue;
            const char *st = redundant_bin(names, n, names[i]);
            if (st) {
                /* say what was checked, no more: the weights were not compared */
                char msg[DCK_ERROR_MESSAGE_MAX];
                snprintf(msg, sizeof msg, "%s/%s: skipped: %s preferred, as transformers loads it; "
                         "its weights were not compared with %s (%s)", path, names[i], st, st,
                         ck->opt.hash_files ? "only its bytes are in the whole-file hashes"
                                            : "nor were its bytes: verify --files checks those");
                if (ck->opt.notice) ck->opt.notice(ck->opt.notice_ctx, msg);
                d.skip[i] = 1;
                continue;
            }
            if (!is_index) {
                char *p = NULL;
                bool regular = dir_entry_regular(path, names[i], &p);
                if (!p) s = dck_oom(NULL);
                else if (!regular && dir_entry_type(names[i]) != DT_DIR)
                    notice(ck, "%s: skipped (%s)", p, "not a regular file");
                free(p);
                if (!regular) continue;
            }
            d.units[d.nunits++] = (dir_unit){i, is_index};
        }
    /* Read into ck directly (into a scratch checkpoint when ck already holds
     * other paths'); files that share names make it read again, namespaced. */
    dck_checkpoint *into = ck, *scratch = NULL;
    if (!s && (ck->nfiles || ck->ntensors || ck->nvalues)) {
        s = dck_ck_create(&ck->opt, &scratch);
        into = scratch;
    }
    for (size_t u = 0; u < d.nunits && !s; u++)
        if (!d.taken[d.units[u].name]) s = load_unit(into, &d, &d.units[u]);
    if ((!s && names_collide(into)) || s == DCK_ERR_LAYOUT) {
        bool noted = !s;
        if (into == ck) dck_ck_reset(ck);
        else dck_ck_reset(scratch);
        dck_clear_error();
        s = open_dir_namespaced(into, &d, noted);
    }
    if (!s && scratch) {
        s = dck_ck_move(ck, scratch, NULL);
        scratch = NULL;
    }
    /* the skipped .bin files' bytes: files without tensors, for --files */
    for (size_t i = 0; i < n && !s && d.skip && ck->opt.hash_files; i++) {
        if (!d.skip[i]) continue;
        char *p = NULL;
        bool regular = dir_entry_regular(path, names[i], &p);
        dck_file *f = NULL;
        uint32_t idx;
        if (!p) s = dck_oom(NULL);
        else if (regular && !(s = dck_file_open(p, names[i], &f))) s = dck_ck_add_file(ck, f, &idx);
        free(p);
    }
    dck_checkpoint_free(scratch);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(d.skip);
    free(d.taken);
    free(d.units);
    if (!s && !d.opened)
        s = dck_set_error(DCK_ERR_FORMAT, "%s: no checkpoint files in this directory", path);
    return s;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s && s[1] ? s + 1 : p;
}

dck_status dck_checkpoint_open(const char *const *paths, size_t npaths, const dck_options *opt,
                               dck_checkpoint **out) {
    *out = NULL;
    if (!npaths || !paths) return dck_set_error(DCK_ERR_INVALID, "no input paths");
    /* bad reader options are an error whatever the paths hold */
    dck_status s = DCK_OK;
    for (size_t i = 0; opt && i < sizeof readers / sizeof readers[0] && !s; i++)
        if (readers[i]->check_options) {
            dck_clear_error();
            if ((s = readers[i]->check_options(opt)) && !*dck_last_error())
                s = dck_set_error(s, "%s reader: bad options: %s", readers[i]->name,
                                  dck_strerror(s));
        }
    dck_checkpoint *ck;
    if (s || (s = dck_ck_create(opt, &ck))) return s;
    for (size_t i = 0; i < npaths && !s; i++) {
        struct stat st;
        if (stat(paths[i], &st) != 0) {
            s = dck_set_error(DCK_ERR_IO, "%s: %s", paths[i], strerror(errno));
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            if (!ck->root) ck->root = dck_strdup(paths[i]);
            s = open_dir(ck, paths[i]);
        } else {
            s = open_file_path(ck, paths[i], base_name(paths[i]));
        }
    }
    if (!s) s = dck_ck_validate(ck);
    /* a file that changed while a reader read it from its map (zeros where
     * it lost pages, io.c): that, not what the reader made of the zeros */
    dck_status changed = dck_files_check(ck->files, ck->nfiles);
    if (changed) s = changed;
    if (s) {
        dck_checkpoint_free(ck);
        return s;
    }
    *out = ck;
    return DCK_OK;
}


/* ------------------------------------------------------------------ manifests
 * A manifest is a text file (YAML or JSON); every checkpoint format is either
 * binary (safetensors starts with a little-endian length whose high bytes
 * are zero, .pt with PK, npy with \x93NUMPY, zstd with 28 b5 2f fd) or a
 * directory, except index files (*.index.json), which are JSON text. So a
 * regular file whose first bytes are text and that is not an index file is
 * taken as a manifest first; callers fall back to the readers when it does
 * not parse as one (one rule for verify and diff). */
int dck_manifest_sniff(const char *path) {
    struct stat st;
    if (!path || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    if (dck_has_suffix(path, ".index.json")) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    unsigned char head[64];
    ssize_t n = read(fd, head, sizeof head);
    close(fd);
    if (n <= 0) return 0;
    for (ssize_t i = 0; i < n; i++) {
        unsigned char c = head[i];
        if (c < 0x20 && c != '\n' && c != '\r' && c != '\t') return 0;
    }
    return 1;
}

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
    X(st_index)    /* *.safetensors.index.json */                                                 \
    X(safetensors) /* safetensors, detcheck's sharded layout */                                   \
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

static dck_status open_dir(dck_checkpoint *ck, const char *path) {
    for (size_t i = 0; i < sizeof readers / sizeof readers[0]; i++)
        if (readers[i]->probe(path, true, NULL, 0)) return reader_open(readers[i], ck, path, "");
    DIR *d = opendir(path);
    if (!d) return dck_set_error(DCK_ERR_IO, "%s: cannot open directory: %s", path, strerror(errno));
    /* names (each followed by its d_type byte), in model order */
    char **names = NULL;
    size_t n = 0, cap = 0;
    dck_status s = DCK_OK;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
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
    closedir(d);
    if (!s) dck_qsort(names, n, sizeof *names, cmp_str);
    size_t opened = 0;
    for (size_t i = 0; i < n && !s; i++) {
        char *p = dck_path_join(path, names[i]);
        unsigned char type = (unsigned char)names[i][strlen(names[i]) + 1];
        struct stat st;
        /* regular files (a link: what it names); the directory says which
         * without a stat, unless its file system does not tell */
        bool regular = type == DT_REG ||
                       ((type == DT_UNKNOWN || type == DT_LNK) && p && stat(p, &st) == 0 && S_ISREG(st.st_mode));
        if (!p) {
            s = dck_oom(NULL);
        } else if (regular) {
            uint8_t head[HEAD_BYTES];
            size_t got = 0;
            dck_file *f = NULL;
            s = sniff(p, names[i], &f, head, &got);
            size_t np = got < PROBE_BYTES ? got : PROBE_BYTES;
            for (size_t r = 0; !s && r < sizeof readers / sizeof readers[0]; r++)
                if (readers[r]->in_directories && readers[r]->probe(p, false, head, np)) {
                    s = reader_open_sniffed(readers[r], ck, f, p, names[i], head, got);
                    f = NULL;
                    opened++;
                    break;
                }
            if (!s && f) {
                /* no reader took it: an error when it looks like a checkpoint
                 * file, else a note */
                if (checkpoint_name(names[i]) || checkpoint_magic(head, got) || f->zstd)
                    s = dck_set_error(DCK_ERR_FORMAT,
                                      "%s: looks like a checkpoint file (by its %s) but no reader "
                                      "takes it (damaged header?)",
                                      p, checkpoint_name(names[i]) ? "name" : "first bytes");
                else
                    notice(ck, "%s: skipped (%s)", p, "not a checkpoint file");
            }
            dck_file_close(f);
        } else if (type != DT_DIR) {
            notice(ck, "%s: skipped (%s)", p, "not a regular file");
        }
        free(p);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    if (!s && !opened)
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

/* Checkpoint files: memory maps, zstd streams, atomic output.
 *
 * Raw files are read through mmap windows so that resident memory does not
 * grow with the checkpoint. zstd files (frame magic 28 b5 2f fd) are
 * decompressed as a stream while hashing; readers that need random access
 * (zip containers, diff) get a one-time decompression into an unlinked
 * temporary file, which is then mapped. */
#include "common/common.h"

#define XXH_INLINE_ALL
#include <xxhash.h>
#include <zstd.h>

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint8_t zstd_magic[4] = {0x28, 0xb5, 0x2f, 0xfd};

/* Reads up to len bytes at off (fewer only at the end of the file); path
 * names the file in the message. */
static dck_status read_full(int fd, const char *path, uint64_t off, void *buf, size_t len,
                            size_t *got) {
    size_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR) continue;
            return dck_set_error(DCK_ERR_IO, "%s: read error: %s", path, strerror(errno));
        }
        if (r == 0) break;
        done += (size_t)r;
    }
    *got = done;
    return DCK_OK;
}

static dck_status zstd_pump(dck_file *f, int fd_out, uint8_t *buf, size_t limit, size_t *got,
                            uint64_t *total);

dck_status dck_file_read_at(dck_file *f, uint64_t off, void *buf, size_t len, size_t *got) {
    return read_full(f->fd, f->path, off, buf, len, got);
}

/* Opens path; with cap > 0 also reads its first up to cap decompressed
 * bytes into head (*got), in the same read that looks for the zstd magic
 * for a raw file: one pread per file where a scan of thousands of small
 * files would make two. */
static dck_status file_open_head(const char *path, const char *relpath, void *headbuf, size_t cap,
                                 size_t *headgot, dck_file **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dck_set_error(DCK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return dck_set_error(DCK_ERR_IO, "%s: not a regular file", path);
    }
    dck_file *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return dck_oom(NULL);
    }
    f->fd = fd;
    f->tmp_fd = -1;
    pthread_mutex_init(&f->map_mu, NULL);
    f->path = dck_strdup(path);
    f->relpath = dck_strdup(relpath ? relpath : path);
    f->size = (uint64_t)st.st_size;
    f->data_size = f->size;
    uint8_t head32[32];
    uint8_t *head = cap >= sizeof head32 ? headbuf : head32;
    size_t got = 0;
    dck_status s = read_full(fd, path, 0, head, head == head32 ? sizeof head32 : cap, &got);
    if (s) {
        dck_file_close(f);
        return s;
    }
    if (got >= 4 && !memcmp(head, zstd_magic, 4)) {
        f->zstd = true;
        unsigned long long cs = ZSTD_getFrameContentSize(head, got);
        f->data_size = (cs == ZSTD_CONTENTSIZE_UNKNOWN || cs == ZSTD_CONTENTSIZE_ERROR)
                           ? UINT64_MAX
                           : (uint64_t)cs;
    }
    if (!f->path || !f->relpath) {
        dck_file_close(f);
        return dck_oom(NULL);
    }
    if (cap) {
        if (f->zstd) { /* the decompressed prefix */
            s = zstd_pump(f, -1, headbuf, cap, headgot, NULL);
        } else if (head == head32) {
            size_t n = got < cap ? got : cap;
            memcpy(headbuf, head32, n);
            *headgot = n;
        } else {
            *headgot = got;
        }
        if (s) {
            dck_file_close(f);
            return s;
        }
    }
    *out = f;
    return DCK_OK;
}

dck_status dck_file_open(const char *path, const char *relpath, dck_file **out) {
    return file_open_head(path, relpath, NULL, 0, NULL, out);
}

dck_status dck_file_open_prefix(const char *path, const char *relpath, void *head, size_t len,
                                size_t *got, dck_file **out) {
    *got = 0;
    return file_open_head(path, relpath, head, len, got, out);
}

void dck_file_close(dck_file *f) {
    if (!f) return;
    if (f->map && f->map_len) munmap((void *)f->map, f->map_len);
    if (f->fd >= 0) close(f->fd);
    if (f->tmp_fd >= 0) close(f->tmp_fd);
    pthread_mutex_destroy(&f->map_mu);
    free(f->path);
    free(f->relpath);
    free(f);
}

/* Decompresses a whole zstd file into fd_out (or, with fd_out < 0, up to
 * limit bytes into buf). Multi-frame files are concatenated, as zstd(1)
 * does. */
static dck_status zstd_pump(dck_file *f, int fd_out, uint8_t *buf, size_t limit, size_t *got,
                            uint64_t *total) {
    ZSTD_DStream *ds = ZSTD_createDStream();
    if (!ds) return dck_oom(NULL);
    size_t inCap = ZSTD_DStreamInSize(), outCap = ZSTD_DStreamOutSize();
    uint8_t *in = malloc(inCap), *outb = malloc(outCap);
    dck_status s = DCK_OK;
    uint64_t written = 0, inoff = 0;
    size_t last = 1, bufgot = 0;
    if (!in || !outb) {
        s = dck_oom(NULL);
        goto done;
    }
    ZSTD_initDStream(ds);
    for (;;) {
        size_t n = 0;
        if ((s = read_full(f->fd, f->path, inoff, in, inCap, &n))) goto done;
        if (n == 0) break;
        inoff += n;
        ZSTD_inBuffer ib = {in, n, 0};
        while (ib.pos < ib.size) {
            ZSTD_outBuffer ob = {outb, outCap, 0};
            last = ZSTD_decompressStream(ds, &ob, &ib);
            if (ZSTD_isError(last)) {
                s = dck_set_error(DCK_ERR_FORMAT, "%s: corrupt zstd frame: %s", f->path,
                                  ZSTD_getErrorName(last));
                goto done;
            }
            if (fd_out >= 0) {
                size_t w = 0;
                while (w < ob.pos) {
                    ssize_t r = write(fd_out, outb + w, ob.pos - w);
                    if (r < 0) {
                        if (errno == EINTR) continue;
                        s = dck_set_error(DCK_ERR_IO,
                                          "%s: cannot write decompressed temporary: %s",
                                          f->path, strerror(errno));
                        goto done;
                    }
                    w += (size_t)r;
                }
            } else {
                size_t take = ob.pos < limit - bufgot ? ob.pos : limit - bufgot;
                memcpy(buf + bufgot, outb, take);
                bufgot += take;
                if (bufgot == limit) goto done_ok;
            }
            written += ob.pos;
        }
    }
    if (last != 0) {
        s = dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated zstd frame", f->path);
        goto done;
    }
done_ok:
    if (got) *got = bufgot;
    if (total) *total = written;
done:
    ZSTD_freeDStream(ds);
    free(in);
    free(outb);
    return s;
}

static dck_status file_map_locked(dck_file *f, const uint8_t **data, uint64_t *len);

/* Threads may ask for the same file's map at once (diff workers, strided
 * pieces); the first one maps or decompresses, the others wait. */
dck_status dck_file_map(dck_file *f, const uint8_t **data, uint64_t *len) {
    pthread_mutex_lock(&f->map_mu);
    dck_status s = file_map_locked(f, data, len);
    pthread_mutex_unlock(&f->map_mu);
    return s;
}

static dck_status file_map_locked(dck_file *f, const uint8_t **data, uint64_t *len) {
    if (f->mapped) {
        *data = f->map;
        *len = f->map_len;
        return DCK_OK;
    }
    int fd = f->fd;
    uint64_t size = f->size;
    struct stat st;
    /* a file cut short since it was opened: map what is there, never past
     * its end (touching that faults); reads beyond say "truncated" */
    if (!f->zstd && fstat(fd, &st) == 0 && (uint64_t)st.st_size < size) size = (uint64_t)st.st_size;
    if (f->zstd) {
        const char *tdir = getenv("TMPDIR");
        if (!tdir || !*tdir) tdir = "/tmp";
        int t = open(tdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (t < 0) {
            char *tmpl = dck_path_join(tdir, "detcheck-zstd.XXXXXX");
            t = tmpl ? mkstemp(tmpl) : -1;
            if (t >= 0) unlink(tmpl);
            free(tmpl);
        }
        if (t < 0)
            return dck_set_error(DCK_ERR_IO, "%s: cannot create a temporary file in %s: %s",
                                 f->path, tdir, strerror(errno));
        uint64_t total = 0;
        dck_status s = zstd_pump(f, t, NULL, 0, NULL, &total);
        if (s) {
            close(t);
            return s;
        }
        f->tmp_fd = t;
        f->data_size = total;
        fd = t;
        size = total;
    }
    if (size == 0) {
        f->mapped = true;
        *data = NULL;
        *len = 0;
        return DCK_OK;
    }
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        return dck_set_error(DCK_ERR_IO, "%s: cannot map: %s", f->path, strerror(errno));
    f->map = m;
    f->map_len = size;
    f->mapped = true;
    *data = f->map;
    *len = size;
    return DCK_OK;
}

dck_status dck_file_pread(dck_file *f, uint64_t off, void *buf, size_t len) {
    if (!f->mapped && f->zstd) {
        const uint8_t *d;
        uint64_t l;
        dck_status s = dck_file_map(f, &d, &l);
        if (s) return s;
    }
    if (f->mapped) {
        if (off > f->map_len || len > f->map_len - off)
            return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: needs bytes up to %llu, has %llu",
                                 f->path, (unsigned long long)(off + len),
                                 (unsigned long long)f->map_len);
        if (len) memcpy(buf, f->map + off, len);
        return DCK_OK;
    }
    size_t got = 0;
    DCK_TRY(read_full(f->fd, f->path, off, buf, len, &got));
    if (got != len)
        return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: needs bytes up to %llu, has %llu",
                             f->path, (unsigned long long)(off + len),
                             (unsigned long long)f->size);
    return DCK_OK;
}

dck_status dck_file_read_prefix(dck_file *f, void *buf, size_t len, size_t *got) {
    if (f->map) {
        size_t n = len < f->map_len ? len : (size_t)f->map_len;
        memcpy(buf, f->map, n);
        *got = n;
        return DCK_OK;
    }
    if (!f->zstd) return read_full(f->fd, f->path, 0, buf, len, got);
    return zstd_pump(f, -1, buf, len, got, NULL);
}

/* ------------------------------------------------------------------ streams */

struct dck_stream {
    dck_file *f;
    size_t window;
    bool hash_file;
    /* XXH3_state_t is 64-byte aligned: XXH3_createState, not inside this
     * calloc'ed struct (an aligned AVX store there faults) */
    XXH3_state_t *fh;
    uint64_t pos;      /* decompressed offset of the next window */
    uint64_t size;     /* raw files: bytes to stream (the size now, if it shrank) */
    /* raw */
    void *map;
    size_t map_len, map_skew;
    const uint8_t *cur;
    size_t cur_len;
    /* zstd */
    ZSTD_DStream *ds;
    uint8_t *in, *out;
    size_t in_cap;
    ZSTD_inBuffer ib;
    uint64_t in_off;
    size_t last;
    bool eof;
};

dck_status dck_stream_open(dck_file *f, size_t window, bool hash_file, dck_stream **out) {
    dck_stream *s = calloc(1, sizeof *s);
    if (!s) return dck_oom(NULL);
    long pg = sysconf(_SC_PAGESIZE);
    if (window < (size_t)pg) window = (size_t)pg;
    window = window / (size_t)pg * (size_t)pg;
    s->f = f;
    s->window = window;
    s->hash_file = hash_file;
    s->last = 1;
    s->size = f->size;
    struct stat st;
    /* a file cut short since it was opened: never map past its end (SIGBUS) */
    if (!f->zstd && fstat(f->fd, &st) == 0 && (uint64_t)st.st_size < s->size)
        s->size = (uint64_t)st.st_size;
    if (!(s->fh = XXH3_createState())) {
        free(s);
        return dck_oom(NULL);
    }
    XXH3_128bits_reset(s->fh);
    if (f->zstd) {
        s->ds = ZSTD_createDStream();
        s->in_cap = ZSTD_DStreamInSize();
        s->in = malloc(s->in_cap);
        s->out = malloc(window);
        if (!s->ds || !s->in || !s->out) {
            dck_stream_close(s);
            return dck_oom(NULL);
        }
        ZSTD_initDStream(s->ds);
    }
    *out = s;
    return DCK_OK;
}

void dck_stream_close(dck_stream *s) {
    if (!s) return;
    if (s->map) munmap(s->map, s->map_len);
    if (s->ds) ZSTD_freeDStream(s->ds);
    XXH3_freeState(s->fh);
    free(s->in);
    free(s->out);
    free(s);
}

static dck_status stream_next_zstd(dck_stream *s, const uint8_t **data, uint64_t *off, size_t *len) {
    dck_file *f = s->f;
    ZSTD_outBuffer ob = {s->out, s->window, 0};
    while (ob.pos < ob.size) {
        if (s->ib.pos == s->ib.size) {
            if (s->eof) break;
            size_t n = 0;
            DCK_TRY(read_full(f->fd, f->path, s->in_off, s->in, s->in_cap, &n));
            if (n == 0) {
                s->eof = true;
                break;
            }
            if (s->hash_file) XXH3_128bits_update(s->fh, s->in, n);
            s->in_off += n;
            s->ib = (ZSTD_inBuffer){s->in, n, 0};
        }
        s->last = ZSTD_decompressStream(s->ds, &ob, &s->ib);
        if (ZSTD_isError(s->last))
            return dck_set_error(DCK_ERR_FORMAT, "%s: corrupt zstd frame: %s", f->path,
                                 ZSTD_getErrorName(s->last));
    }
    if (s->eof && ob.pos == 0 && s->last != 0)
        return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated zstd frame", f->path);
    *data = s->out;
    *off = s->pos;
    *len = ob.pos;
    s->pos += ob.pos;
    if (ob.pos == 0) f->data_size = s->pos;
    return DCK_OK;
}

dck_status dck_stream_next(dck_stream *s, const uint8_t **data, uint64_t *off, size_t *len) {
    if (s->f->zstd) return stream_next_zstd(s, data, off, len);
    if (s->map) {
        munmap(s->map, s->map_len);
        s->map = NULL;
    }
    s->cur = NULL;
    s->cur_len = 0;
    *off = s->pos;
    if (s->pos >= s->size) {
        *data = NULL;
        *len = 0;
        return DCK_OK;
    }
    uint64_t n = s->size - s->pos;
    if (n > s->window) n = s->window;
    void *m = mmap(NULL, (size_t)n, PROT_READ, MAP_PRIVATE, s->f->fd, (off_t)s->pos);
    if (m == MAP_FAILED)
        return dck_set_error(DCK_ERR_IO, "%s: cannot map: %s", s->f->path, strerror(errno));
    madvise(m, (size_t)n, MADV_SEQUENTIAL);
    s->map = m;
    s->map_len = (size_t)n;
    s->cur = m;
    s->cur_len = (size_t)n;
    *data = m;
    *len = (size_t)n;
    s->pos += n;
    return DCK_OK;
}

void dck_stream_hash_window(dck_stream *s) {
    if (s->hash_file && !s->f->zstd && s->cur_len) XXH3_128bits_update(s->fh, s->cur, s->cur_len);
}

dck_digest dck_stream_file_hash(dck_stream *s) {
    XXH128_hash_t h = XXH3_128bits_digest(s->fh);
    return (dck_digest){h.high64, h.low64};
}

/* ------------------------------------------------------------------ atomic output */

dck_status dck_atomic_open(const char *path, dck_atomic_file *af) {
    af->fd = -1;
    af->path = dck_strdup(path);
    size_t n = strlen(path) + 32;
    af->tmp = malloc(n);
    if (!af->path || !af->tmp) {
        free(af->path);
        free(af->tmp);
        af->path = af->tmp = NULL;
        return dck_oom(NULL);
    }
    snprintf(af->tmp, n, "%s.tmp.XXXXXX", path);
    af->fd = mkstemp(af->tmp);
    if (af->fd < 0) {
        dck_status s = dck_set_error(DCK_ERR_IO, "%s: cannot create temporary file: %s", path,
                                     strerror(errno));
        free(af->path);
        free(af->tmp);
        af->path = af->tmp = NULL;
        return s;
    }
    fchmod(af->fd, 0644);
    return DCK_OK;
}

dck_status dck_atomic_write(dck_atomic_file *af, const void *data, size_t len) {
    const uint8_t *p = data;
    while (len) {
        ssize_t r = write(af->fd, p, len);
        if (r < 0) {
            if (errno == EINTR) continue;
            return dck_set_error(DCK_ERR_IO, "%s: write error: %s", af->path, strerror(errno));
        }
        p += r;
        len -= (size_t)r;
    }
    return DCK_OK;
}

dck_status dck_atomic_commit(dck_atomic_file *af) {
    dck_status s = DCK_OK;
    if (fsync(af->fd) != 0)
        s = dck_set_error(DCK_ERR_IO, "%s: fsync failed: %s", af->path, strerror(errno));
    if (close(af->fd) != 0 && !s)
        s = dck_set_error(DCK_ERR_IO, "%s: close failed: %s", af->path, strerror(errno));
    af->fd = -1;
    if (!s && rename(af->tmp, af->path) != 0)
        s = dck_set_error(DCK_ERR_IO, "%s: rename failed: %s", af->path, strerror(errno));
    if (s) {
        unlink(af->tmp);
    } else {
        char *d = dck_strdup(af->path);
        if (d) {
            int dfd = open(dirname(d), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dfd >= 0) {
                fsync(dfd);
                close(dfd);
            }
            free(d);
        }
    }
    free(af->path);
    free(af->tmp);
    af->path = af->tmp = NULL;
    return s;
}

void dck_atomic_abort(dck_atomic_file *af) {
    if (af->fd >= 0) close(af->fd);
    af->fd = -1;
    if (af->tmp) unlink(af->tmp);
    free(af->path);
    free(af->tmp);
    af->path = af->tmp = NULL;
}

dck_status dck_write_file_atomic(const char *path, const void *data, size_t len) {
    dck_atomic_file af;
    dck_status s = dck_atomic_open(path, &af);
    if (s) return s;
    s = dck_atomic_write(&af, data, len);
    if (s) {
        dck_atomic_abort(&af);
        return s;
    }
    return dck_atomic_commit(&af);
}

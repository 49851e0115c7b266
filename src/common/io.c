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

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>


/* ------------------------------------------------------------------ decoded bytes
 * zstd inputs (and a .pt's inflated zip members) grow with the data, not with
 * the file: a 72 KB file of zstd RLE blocks decodes to 2 GiB. Decoded bytes
 * are bounded by max(1 GiB, 4096 x the bytes on disk) (real checkpoints
 * compress a few times at most; zeros compress 10000x but fit under the floor
 * when small), or by DETCHECK_MAX_DECODED when set. */
#define DECODED_FLOOR ((uint64_t)1 << 30)
#define DECODED_RATIO 4096u

dck_status dck_decoded_limit(const char *label, uint64_t disk, uint64_t *out) {
    const char *v = getenv("DETCHECK_MAX_DECODED");
    if (!v || !*v) {
        *out = disk > DECODED_FLOOR / DECODED_RATIO ? disk * DECODED_RATIO : DECODED_FLOOR;
        if (disk > UINT64_MAX / DECODED_RATIO) *out = UINT64_MAX;
        return DCK_OK;
    }
    static const struct {
        char suffix;
        int shift;
    } units[] = {{'K', 10}, {'M', 20}, {'G', 30}, {'T', 40}};
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    int shift = 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0] && *end; i++)
        if (*end == units[i].suffix || *end == units[i].suffix + 32) {
            shift = units[i].shift;
            end++;
        }
    if (errno || end == v || *end || *v == '-' || (shift && n > (UINT64_MAX >> shift)))
        return dck_set_error(DCK_ERR_INVALID, "%s: DETCHECK_MAX_DECODED=%s is not a size in bytes (K, M, G, T)",
                             label, v);
    *out = (uint64_t)n << shift;
    return DCK_OK;
}

dck_status dck_decoded_too_large(const char *label, const char *what, uint64_t limit) {
    return dck_set_error(DCK_ERR_LIMIT,
                         "%s: %s more than %llu bytes (limit: max(1 GiB, 4096 x the file's size); "
                         "DETCHECK_MAX_DECODED=BYTES raises it)",
                         label, what, (unsigned long long)limit);
}

/* ------------------------------------------------------------------ file types */

const char *dck_file_type_name(mode_t m) {
    static const struct {
        mode_t type;
        const char *name;
    } types[] = {{S_IFIFO, "a FIFO"},          {S_IFCHR, "a character device"},
                 {S_IFBLK, "a block device"},  {S_IFSOCK, "a socket"},
                 {S_IFDIR, "a directory"},     {S_IFLNK, "a symbolic link"}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if ((m & S_IFMT) == types[i].type) return types[i].name;
    return "not a regular file";
}

/* Opens a regular file for reading without ever blocking: a FIFO or a
 * device opened plainly can wait forever for a writer, so the open is
 * non-blocking and the type is checked on the descriptor before any read. */
dck_status dck_open_regular(const char *path, int *fd_out, struct stat *st_out) {
    *fd_out = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return dck_set_error(DCK_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return dck_set_error(DCK_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return dck_set_error(DCK_ERR_IO, "%s: not a regular file (%s)", path, dck_file_type_name(st.st_mode));
    }
    /* O_NONBLOCK stays: it has no effect on a regular file's reads (they
     * never return EAGAIN), and clearing it cost two fcntl calls a file */
    if (st_out) *st_out = st;
    *fd_out = fd;
    return DCK_OK;
}

/* ------------------------------------------------------------------ descriptors
 * A directory of thousands of files must not hold a descriptor each (the
 * default `ulimit -n` is 1024): the first files opened keep theirs, up to a
 * quarter of the limit (at most KEEP_FDS_MAX; the CLI raises its soft limit
 * to the hard one at start); later ones are closed after the sniff
 * and reopened for each use (a stream, a map, a read), and the reopened file
 * must be the same one (device and inode). */
#define KEEP_FDS_MAX 8192
static atomic_int kept_fds;
static int keep_cap(void) {
    static atomic_int cap;
    int c = atomic_load(&cap);
    if (!c) {
        struct rlimit rl;
        rlim_t n = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
        c = n == RLIM_INFINITY || n / 4 > KEEP_FDS_MAX ? KEEP_FDS_MAX : (int)(n / 4);
        if (c < 4) c = 4;
        atomic_store(&cap, c);
    }
    return c;
}

/* A descriptor for f: its own, or a fresh one the caller hands back with
 * file_fd_put. */
static dck_status file_fd_get(dck_file *f, int *fd) {
    if (f->fd >= 0) {
        *fd = f->fd;
        return DCK_OK;
    }
    struct stat st = {0}; /* set by dck_open_regular; GCC -O3 cannot tell */
    DCK_TRY(dck_open_regular(f->path, fd, &st));
    if (st.st_dev != f->dev || st.st_ino != f->ino) {
        close(*fd);
        *fd = -1;
        return dck_set_error(DCK_ERR_IO, "%s: changed while being read (replaced by another file)",
                             f->path);
    }
    return DCK_OK;
}

static void file_fd_put(const dck_file *f, int fd) {
    if (fd >= 0 && fd != f->fd) close(fd);
}

dck_status dck_file_fd(dck_file *f, int *fd) { return file_fd_get(f, fd); }
void dck_file_fd_put(dck_file *f, int fd) { file_fd_put(f, fd); }

/* The size the file has now (its size when opened if it cannot be asked). */
uint64_t dck_file_size_now(dck_file *f) {
    struct stat st;
    if (f->fd >= 0) return fstat(f->fd, &st) == 0 ? (uint64_t)st.st_size : f->size;
    return stat(f->path, &st) == 0 && st.st_ino == f->ino ? (uint64_t)st.st_size : f->size;
}

/* ------------------------------------------------------------------ SIGBUS
 * A mapped file that shrinks under us faults with SIGBUS when its missing
 * pages are touched, on whichever thread touches them: a digest kernel, a
 * header parser, a memcpy in libc. Rather than a guard around each piece
 * of code that reads a map (one path left out is a crash), every map this
 * file makes is registered with its dck_file, and the handler, installed
 * with the first map, answers a fault inside one of them: it maps zeros
 * over the lost pages (from the faulting page to the map's end), marks the
 * file changed and returns, so the access runs again and reads zeros. The
 * work goes on over zeros and ends at the next check of the file
 * (dck_files_check, dck_file_changed): the engines check after each window,
 * dck_checkpoint_open after its readers, dck_ck_build_manifest before any
 * digest is reported. No jump leaves code that holds locks or memory. A
 * SIGBUS outside the registered maps goes to the handler that was there
 * before (or kills the process as the default does).
 *
 * The registry is read by the handler, so it is never moved or freed:
 * chunks of slots linked once; each slot has a sequence number (odd while
 * it is written), and the handler skips a slot it sees change. */
#define BUS_SLOTS 256
typedef struct {
    unsigned seq;
    uintptr_t lo, hi; /* hi == 0: free */
    dck_file *f;
} bus_slot;
typedef struct bus_chunk {
    bus_slot s[BUS_SLOTS];
    struct bus_chunk *next;
} bus_chunk;
static bus_chunk bus_first;
static pthread_mutex_t bus_mu = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction bus_prev;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;
static uintptr_t bus_page;

/* The registered map holding address a: its file and end, or NULL. */
static dck_file *bus_find(uintptr_t a, uintptr_t *hi) {
    for (bus_chunk *c = &bus_first; c; c = __atomic_load_n(&c->next, __ATOMIC_ACQUIRE))
        for (int i = 0; i < BUS_SLOTS; i++) {
            bus_slot *b = &c->s[i];
            unsigned q = __atomic_load_n(&b->seq, __ATOMIC_ACQUIRE);
            uintptr_t lo = __atomic_load_n(&b->lo, __ATOMIC_RELAXED);
            uintptr_t h = __atomic_load_n(&b->hi, __ATOMIC_RELAXED);
            dck_file *f = __atomic_load_n(&b->f, __ATOMIC_RELAXED);
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if ((q & 1) || q != __atomic_load_n(&b->seq, __ATOMIC_RELAXED)) continue;
            if (a >= lo && a < h) {
                *hi = h;
                return f;
            }
        }
    return NULL;
}

static void bus_handler(int sig, siginfo_t *si, void *uc) {
    uintptr_t a = si ? (uintptr_t)si->si_addr : 0, hi;
    dck_file *f = si && si->si_code == BUS_ADRERR ? bus_find(a, &hi) : NULL;
    if (f) {
        uintptr_t pg = a - a % bus_page;
        if (mmap((void *)pg, hi - pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
            MAP_FAILED) {
            __atomic_store_n(&f->lost, 1, __ATOMIC_RELEASE);
            return; /* the access runs again, over zeros */
        }
    }
    if ((bus_prev.sa_flags & SA_SIGINFO) && bus_prev.sa_sigaction) {
        bus_prev.sa_sigaction(sig, si, uc);
        return;
    }
    if (bus_prev.sa_handler != SIG_DFL && bus_prev.sa_handler != SIG_IGN) {
        bus_prev.sa_handler(sig);
        return;
    }
    /* the default action: returning re-runs the access, which now kills */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGBUS, &dfl, NULL);
}

static void bus_install(void) {
    bus_page = (uintptr_t)sysconf(_SC_PAGESIZE);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = bus_handler;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &bus_prev);
}

static void bus_slot_write(bus_slot *b, uintptr_t lo, uintptr_t hi, dck_file *f) {
    __atomic_store_n(&b->seq, b->seq + 1, __ATOMIC_RELAXED); /* odd: being written */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&b->f, f, __ATOMIC_RELAXED);
    __atomic_store_n(&b->lo, lo, __ATOMIC_RELAXED);
    __atomic_store_n(&b->hi, hi, __ATOMIC_RELAXED);
    __atomic_store_n(&b->seq, b->seq + 1, __ATOMIC_RELEASE);
}

/* Registers [p, p + len) as a map of f (0: ok; -1: no memory for the
 * registry, ENOMEM). */
static int bus_register(dck_file *f, const void *p, size_t len) {
    pthread_once(&bus_once, bus_install);
    pthread_mutex_lock(&bus_mu);
    bus_chunk *c = &bus_first;
    for (;;) {
        for (int i = 0; i < BUS_SLOTS; i++)
            if (!c->s[i].hi) {
                bus_slot_write(&c->s[i], (uintptr_t)p, (uintptr_t)p + len, f);
                pthread_mutex_unlock(&bus_mu);
                return 0;
            }
        if (!c->next) {
            bus_chunk *n = calloc(1, sizeof *n); /* never freed: the handler may walk it */
            if (!n) break;
            __atomic_store_n(&c->next, n, __ATOMIC_RELEASE);
        }
        c = c->next;
    }
    pthread_mutex_unlock(&bus_mu);
    errno = ENOMEM;
    return -1;
}

static void bus_unregister(const void *p) {
    if (!p) return;
    pthread_mutex_lock(&bus_mu);
    for (bus_chunk *c = &bus_first; c; c = c->next)
        for (int i = 0; i < BUS_SLOTS; i++)
            if (c->s[i].hi && c->s[i].lo == (uintptr_t)p) {
                bus_slot_write(&c->s[i], 0, 0, NULL);
                pthread_mutex_unlock(&bus_mu);
                return;
            }
    pthread_mutex_unlock(&bus_mu);
}

/* Test hook: DCK_TEST_TRUNCATE_MAPPED=PATH truncates the file PATH (that
 * exact path, as opened) right after a map of it is made (a reader's map of
 * the whole file, a stream window, a header), so that the tests fault
 * where they choose: DCK_TEST_TRUNCATE_AT=N after its Nth map only
 * (counted from 1; default: every map), DCK_TEST_TRUNCATE_SIZE=BYTES to
 * that size (default 0). */
static atomic_int truncate_maps;
static void test_truncate_mapped(const dck_file *f) {
    const char *t = getenv("DCK_TEST_TRUNCATE_MAPPED");
    if (!t || !*t || !f->path || strcmp(t, f->path)) return;
    const char *at = getenv("DCK_TEST_TRUNCATE_AT"), *size = getenv("DCK_TEST_TRUNCATE_SIZE");
    int n = atomic_fetch_add(&truncate_maps, 1) + 1;
    if (at && *at && atoi(at) != n) return;
    if (truncate(f->path, size && *size ? (off_t)strtoll(size, NULL, 10) : 0) != 0) {
        /* nothing to do: the test then sees no fault and fails */
    }
}

/* mmap of [off, off + len) of fd, registered as a map of f (MAP_FAILED and
 * errno on failure). */
static void *map_registered(dck_file *f, int fd, uint64_t off, size_t len) {
    void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, (off_t)off);
    if (m == MAP_FAILED) return m;
    if (bus_register(f, m, len)) {
        munmap(m, len);
        errno = ENOMEM;
        return MAP_FAILED;
    }
    __atomic_store_n(&f->was_mapped, 1, __ATOMIC_RELAXED);
    if (!f->zstd) test_truncate_mapped(f);
    return m;
}

static void unmap_registered(void *m, size_t len) {
    if (!m) return;
    bus_unregister(m);
    munmap(m, len);
}

void *dck_file_map_range(dck_file *f, uint64_t off, size_t len) {
    int fd;
    if (f->zstd || file_fd_get(f, &fd)) return NULL;
    void *m = map_registered(f, fd, off, len);
    file_fd_put(f, fd);
    return m == MAP_FAILED ? NULL : m;
}

void dck_file_unmap_range(void *p, size_t len) { unmap_registered(p, len); }

bool dck_file_changed(const dck_file *f) { return __atomic_load_n(&f->lost, __ATOMIC_ACQUIRE); }

dck_status dck_files_check(dck_file *const *files, size_t n) {
    for (size_t i = 0; i < n; i++) {
        dck_file *f = files[i];
        /* a file cut inside its last page loses no page: the map reads
         * zeros past its new end, so its size is asked too (one that grew
         * is read as it was: its first `size` bytes) */
        if (f && (dck_file_changed(f) ||
                  (f->was_mapped && !f->zstd && f->relpath && dck_file_size_now(f) < f->size)))
            return dck_file_changed_error(f);
    }
    return DCK_OK;
}

dck_status dck_file_changed_error(dck_file *f) {
    uint64_t now = dck_file_size_now(f);
    /* a mapped page lost while the file kept its size: a read error of the
     * disk or network file system (the kernel says SIGBUS for that too) */
    if (dck_file_changed(f) && now >= f->size)
        return dck_set_error(DCK_ERR_IO, "%s: a mapped page could not be read (I/O error, or the file "
                             "changed while being read; %llu bytes)", f->path, (unsigned long long)now);
    return dck_set_error(DCK_ERR_IO, "%s: changed while being read (now %llu bytes, was %llu)", f->path,
                         (unsigned long long)now, (unsigned long long)f->size);
}

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

static dck_status file_read(dck_file *f, uint64_t off, void *buf, size_t len, size_t *got) {
    int fd;
    DCK_TRY(file_fd_get(f, &fd));
    dck_status s = read_full(fd, f->path, off, buf, len, got);
    file_fd_put(f, fd);
    return s;
}

static dck_status zstd_pump(dck_file *f, int fd_out, uint8_t *buf, size_t limit, size_t *got,
                            uint64_t *total);

dck_status dck_file_read_at(dck_file *f, uint64_t off, void *buf, size_t len, size_t *got) {
    return file_read(f, off, buf, len, got);
}

/* ------------------------------------------------------------------ zstd frames
 * A zstd file is a sequence of frames (RFC 8878): zstd frames (magic
 * 28 b5 2f fd), each decoding to its declared content size if it has one,
 * and skippable frames (magic 0x184D2A50..5F, a 4-byte length, data), which
 * decode to nothing (pzstd puts one first). Frames are walked at open by
 * their headers and block headers (one small read per block, no
 * decompression): the decoded size is the sum of the declared sizes, and
 * anything after the last whole frame is an error, as trailing bytes are in a
 * plain file. A frame that declares no size (zstd(1) writing from a pipe) is
 * decoded once here, output discarded, to learn its size: the readers judge
 * the decoded bytes as they judge a plain file (safetensors' and .npy's
 * "trailing bytes" checks need the size), and a frame appended after a
 * valid file is caught when it is opened, not hashed as part of it. The
 * decoded-size limit stops that decoding as it stops any other. */
#define ZSTD_SKIP_MAGIC 0x184D2A50u
#define ZSTD_MAGIC 0xFD2FB528u

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int is_zstd_start(const uint8_t *h, size_t n) {
    if (n < 4) return 0;
    uint32_t m = le32(h);
    return m == ZSTD_MAGIC || (m & 0xFFFFFFF0u) == ZSTD_SKIP_MAGIC;
}

/* The decoded size of the frame in bytes [from, to) of f, decoded with ds
 * into a scratch buffer; more than room bytes is the decoded-size error. */
static dck_status zstd_frame_size(dck_file *f, int fd, ZSTD_DStream *ds, uint64_t from, uint64_t to,
                                  uint64_t room, uint64_t limit, uint64_t *out) {
    size_t in_cap = ZSTD_DStreamInSize(), out_cap = ZSTD_DStreamOutSize();
    uint8_t *in = malloc(in_cap), *outb = malloc(out_cap);
    dck_status s = in && outb ? DCK_OK : dck_oom(NULL);
    uint64_t n = 0;
    size_t last = 1;
    ZSTD_initDStream(ds);
    while (!s && from < to) {
        size_t got = 0, want = to - from < in_cap ? (size_t)(to - from) : in_cap;
        if ((s = read_full(fd, f->path, from, in, want, &got))) break;
        if (got == 0) {
            s = dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated zstd frame", f->path);
            break;
        }
        from += got;
        ZSTD_inBuffer ib = {in, got, 0};
        /* zstd consumes a frame's last byte only once all its output is out */
        while (!s && ib.pos < ib.size) {
            ZSTD_outBuffer ob = {outb, out_cap, 0};
            last = ZSTD_decompressStream(ds, &ob, &ib);
            if (ZSTD_isError(last))
                s = dck_set_error(DCK_ERR_FORMAT, "%s: corrupt zstd frame: %s", f->path,
                                  ZSTD_getErrorName(last));
            else if (ob.pos > room - n)
                s = dck_decoded_too_large(f->path, "decompresses to", limit);
            else
                n += ob.pos;
        }
    }
    if (!s && last != 0) s = dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated zstd frame", f->path);
    free(in);
    free(outb);
    *out = n;
    return s;
}

/* Walks the frames of f; *size: the decoded size, at most limit. *ds: the
 * decoder of frames that declare no size, created on the first one. *zstd:
 * set when the failure came after the frames' structure was read as zstd's
 * (the decoded size over the limit, a frame that does not decode). */
static dck_status zstd_walk_frames(dck_file *f, int fd, uint64_t limit, ZSTD_DStream **ds,
                                   uint64_t *size, bool *zstd) {
    uint64_t pos = 0, total = 0, frames = 0;
    while (pos < f->size) {
        uint8_t h[18];
        size_t got = 0;
        DCK_TRY(read_full(fd, f->path, pos, h, sizeof h, &got));
        if (got < 8 && !(got >= 4 && le32(h) == ZSTD_MAGIC))
            return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated zstd frame at byte %llu", f->path,
                                 (unsigned long long)pos);
        uint32_t m = le32(h);
        if ((m & 0xFFFFFFF0u) == ZSTD_SKIP_MAGIC) {
            uint64_t n = 8 + (uint64_t)le32(h + 4);
            if (n > f->size - pos)
                return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated skippable zstd frame at byte %llu",
                                     f->path, (unsigned long long)pos);
            pos += n;
            frames++;
            continue;
        }
        if (m != ZSTD_MAGIC)
            return dck_set_error(DCK_ERR_FORMAT, "%s: %llu bytes after the last zstd frame (byte %llu on)",
                                 f->path, (unsigned long long)(f->size - pos), (unsigned long long)pos);
        if (got < 5)
            return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated zstd frame at byte %llu", f->path,
                                 (unsigned long long)pos);
        uint8_t fhd = h[4];
        static const uint8_t did_bytes[4] = {0, 1, 2, 4};
        int fcs_flag = fhd >> 6, single = (fhd >> 5) & 1, checksum = (fhd >> 2) & 1;
        if (fhd & 0x08)
            return dck_set_error(DCK_ERR_FORMAT, "%s: corrupt zstd frame at byte %llu (reserved bit set)",
                                 f->path, (unsigned long long)pos);
        size_t fcs_bytes = fcs_flag == 0 ? (size_t)single : (size_t)1 << fcs_flag;
        size_t hl = 5 + (size_t)!single + did_bytes[fhd & 3] + fcs_bytes;
        if (got < hl)
            return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated zstd frame at byte %llu", f->path,
                                 (unsigned long long)pos);
        if (fcs_bytes) {
            const uint8_t *q = h + hl - fcs_bytes;
            uint64_t cs = 0;
            for (size_t k = 0; k < fcs_bytes; k++) cs |= (uint64_t)q[k] << (8 * k);
            if (fcs_bytes == 2) cs += 256;
            total = cs > UINT64_MAX - total ? UINT64_MAX : total + cs;
            if (total > limit) {
                *zstd = true;
                return dck_decoded_too_large(f->path, "decompresses to", limit);
            }
        }
        uint64_t p = pos + hl;
        for (;;) {
            uint8_t bh[3];
            DCK_TRY(read_full(fd, f->path, p, bh, 3, &got));
            if (got < 3)
                return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated zstd frame at byte %llu", f->path,
                                     (unsigned long long)pos);
            uint32_t b = (uint32_t)bh[0] | (uint32_t)bh[1] << 8 | (uint32_t)bh[2] << 16;
            int type = (b >> 1) & 3;
            if (type == 3)
                return dck_set_error(DCK_ERR_FORMAT, "%s: corrupt zstd frame at byte %llu (reserved block type)",
                                     f->path, (unsigned long long)pos);
            uint64_t payload = type == 1 ? 1 : (uint64_t)(b >> 3);
            p += 3 + payload;
            if (p > f->size)
                return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated zstd frame at byte %llu", f->path,
                                     (unsigned long long)pos);
            if (b & 1) break;
        }
        if (checksum) p += 4;
        if (p > f->size)
            return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated zstd frame at byte %llu", f->path,
                                 (unsigned long long)pos);
        if (!fcs_bytes) {
            uint64_t cs;
            *zstd = true; /* an error from here on is the frame's, not a raw file's */
            if (!*ds && !(*ds = ZSTD_createDStream())) return dck_oom(NULL);
            DCK_TRY(zstd_frame_size(f, fd, *ds, pos, p, limit - total, limit, &cs));
            *zstd = false;
            total += cs; /* cs <= limit - total */
        }
        pos = p;
        frames++;
    }
    (void)frames;
    *size = total;
    return DCK_OK;
}

static dck_status zstd_walk(dck_file *f, int fd, uint64_t *size, bool *zstd) {
    uint64_t limit;
    *zstd = false;
    DCK_TRY(dck_decoded_limit(f->path, f->size, &limit));
    ZSTD_DStream *ds = NULL;
    dck_status s = zstd_walk_frames(f, fd, limit, &ds, size, zstd);
    if (ds) ZSTD_freeDStream(ds);
    return s;
}

/* Opens path; with cap > 0 also reads its first up to cap decompressed
 * bytes into head (*got), in the same read that looks for the zstd magic
 * for a raw file: one pread per file where a scan of thousands of small
 * files would make two. */
static dck_status file_open_head(const char *path, const char *relpath, void *headbuf, size_t cap,
                                 size_t *headgot, dck_file **out) {
    *out = NULL;
    int fd;
    struct stat st;
    DCK_TRY(dck_open_regular(path, &fd, &st));
    dck_file *f = calloc(1, sizeof *f);
    if (!f) {
        close(fd);
        return dck_oom(NULL);
    }
    f->fd = fd;
    f->tmp_fd = -1;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    pthread_mutex_init(&f->map_mu, NULL);
    f->path = dck_strdup(path);
    f->relpath = dck_strdup(relpath ? relpath : path);
    f->size = (uint64_t)st.st_size;
    f->data_size = f->size;
    if (!f->path || !f->relpath) {
        dck_file_close(f);
        return dck_oom(NULL);
    }
    uint8_t head32[32];
    uint8_t *head = cap >= sizeof head32 ? headbuf : head32;
    size_t got = 0;
    dck_status s = read_full(fd, path, 0, head, head == head32 ? sizeof head32 : cap, &got);
    if (s) {
        dck_file_close(f);
        return s;
    }
    if (is_zstd_start(head, got)) {
        uint64_t ds = 0;
        bool sure = false;
        s = zstd_walk(f, fd, &ds, &sure);
        /* a raw file that happens to start like a skippable frame stays raw,
         * unless its frames were read as zstd's up to the failure */
        if (s && le32(head) != ZSTD_MAGIC && !sure) {
            dck_clear_error();
            s = DCK_OK;
        } else if (s) {
            dck_file_close(f);
            return s;
        } else {
            f->zstd = true;
            f->data_size = ds;
        }
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
    /* past the cap of kept descriptors: reopened for each use */
    if (atomic_fetch_add(&kept_fds, 1) >= keep_cap()) {
        atomic_fetch_sub(&kept_fds, 1);
        close(f->fd);
        f->fd = -1;
    } else {
        f->fd_kept = true;
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
    if (f->map && f->map_len) unmap_registered((void *)f->map, f->map_len);
    if (f->fd >= 0) close(f->fd);
    if (f->fd_kept) atomic_fetch_sub(&kept_fds, 1);

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
    uint64_t written = 0, inoff = 0, cap = UINT64_MAX;
    size_t last = 1, bufgot = 0;
    int fd = -1;
    if (!in || !outb) {
        s = dck_oom(NULL);
        goto done;
    }
    if (fd_out >= 0 && (s = dck_decoded_limit(f->path, f->size, &cap))) goto done;
    if ((s = file_fd_get(f, &fd))) goto done;
    ZSTD_initDStream(ds);
    for (;;) {
        size_t n = 0;
        if ((s = read_full(fd, f->path, inoff, in, inCap, &n))) goto done;
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
                if (ob.pos > cap - written) {
                    s = dck_decoded_too_large(f->path, "decompresses to", cap);
                    goto done;
                }
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
    file_fd_put(f, fd);
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
    int fd = -1, own = -1;
    uint64_t size = f->size;
    struct stat st;
    if (!f->zstd) {
        DCK_TRY(file_fd_get(f, &own));
        fd = own;
    }
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
        f->data_size = total;
        fd = own = t; /* the map keeps the temporary's pages; no descriptor is held */
        size = total;
    }
    if (size == 0) {
        file_fd_put(f, own);
        f->mapped = true;
        *data = NULL;
        *len = 0;
        return DCK_OK;
    }
    void *m = map_registered(f, fd, 0, size);
    int merr = errno;
    file_fd_put(f, own);
    if (m == MAP_FAILED)
        return dck_set_error(DCK_ERR_IO, "%s: cannot map: %s", f->path, strerror(merr));
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
    DCK_TRY(file_read(f, off, buf, len, &got));
    if (got != len) /* the size it has now: it may have shrunk since it was opened */
        return dck_set_error(DCK_ERR_TRUNCATED, "%s: truncated: needs bytes up to %llu, has %llu",
                             f->path, (unsigned long long)(off + len),
                             (unsigned long long)dck_file_size_now(f));
    return DCK_OK;
}

dck_status dck_file_read_prefix(dck_file *f, void *buf, size_t len, size_t *got) {
    if (f->map) {
        size_t n = len < f->map_len ? len : (size_t)f->map_len;
        memcpy(buf, f->map, n);
        *got = n;
        return DCK_OK;
    }
    if (!f->zstd) return file_read(f, 0, buf, len, got);
    return zstd_pump(f, -1, buf, len, got, NULL);
}

/* ------------------------------------------------------------------ streams */

struct dck_stream {
    dck_file *f;
    int fd;            /* the file's, or one opened for this stream */
    uint64_t cap;      /* zstd: the decoded-size limit */
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
    s->fd = -1;
    s->window = window;
    s->hash_file = hash_file;
    s->last = 1;
    s->size = f->size;
    struct stat st;
    dck_status st_s = file_fd_get(f, &s->fd);
    if (!st_s && f->zstd) st_s = dck_decoded_limit(f->path, f->size, &s->cap);
    if (st_s) {
        file_fd_put(f, s->fd);
        free(s);
        return st_s;
    }
    /* a file cut short since it was opened: never map past its end (SIGBUS) */
    if (!f->zstd && fstat(s->fd, &st) == 0 && (uint64_t)st.st_size < s->size)
        s->size = (uint64_t)st.st_size;
    if (!(s->fh = XXH3_createState())) {
        file_fd_put(f, s->fd);
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
    unmap_registered(s->map, s->map_len);
    file_fd_put(s->f, s->fd);
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
            DCK_TRY(read_full(s->fd, f->path, s->in_off, s->in, s->in_cap, &n));
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
    if (ob.pos > s->cap - s->pos) return dck_decoded_too_large(f->path, "decompresses to", s->cap);
    *data = s->out;
    *off = s->pos;
    *len = ob.pos;
    s->pos += ob.pos;
    if (ob.pos == 0) f->data_size = s->pos;
    return DCK_OK;
}

dck_status dck_stream_next(dck_stream *s, const uint8_t **data, uint64_t *off, size_t *len) {
    if (s->f->zstd) return stream_next_zstd(s, data, off, len);
    unmap_registered(s->map, s->map_len);
    s->map = NULL;
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
    void *m = map_registered(s->f, s->fd, s->pos, (size_t)n);
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

/* ------------------------------------------------------------------ atomic output
 * PATH is written to PATH.tmp.XXXXXX (mkstemp), fsynced, renamed over PATH,
 * and the directory fsynced. The new file gets an existing PATH's mode, else
 * 0666 less the umask, as open(2) would give. A run killed mid-write leaves
 * its temporary; the next successful write of PATH removes those of PATH
 * (regular files named PATH.tmp. and 6 mkstemp characters, untouched for a
 * minute: a live writer rewrites its own far more often).
 *
 * Fault injection for the tests: DCK_TEST_FAIL_WRITE=N makes the Nth
 * write, fsync or rename of the atomic writer (counted from 1 over the
 * process) fail with EIO; DCK_TEST_OUTPUT_APPEARS=PATH creates PATH (a
 * user's file) just before the temporary is renamed onto PATH, as a file
 * that appears between the last check of the output rule and the rename. */
#define STALE_TMP_SECONDS 60

static atomic_int fault_count;

static int fault_now(void) {
    const char *v = getenv("DCK_TEST_FAIL_WRITE");
    if (!v || !*v) return 0;
    int n = atoi(v);
    if (n <= 0 || atomic_fetch_add(&fault_count, 1) + 1 != n) return 0;
    errno = EIO;
    return 1;
}

/* The umask, without changing it: /proc/self/status says it (Linux 4.7+);
 * else the classic umask(0)/umask(old) pair, under a lock. */
static mode_t current_umask(void) {
    FILE *fp = fopen("/proc/self/status", "re");
    if (fp) {
        char line[256];
        unsigned int m;
        while (fgets(line, sizeof line, fp))
            if (sscanf(line, "Umask: %o", &m) == 1) {
                fclose(fp);
                return (mode_t)m;
            }
        fclose(fp);
    }
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    mode_t old = umask(022);
    umask(old);
    pthread_mutex_unlock(&mu);
    return old;
}

static int is_our_tmp(const char *name, const char *base) {
    size_t l = strlen(base);
    if (strncmp(name, base, l) || strncmp(name + l, ".tmp.", 5)) return 0;
    const char *x = name + l + 5;
    if (strlen(x) != 6) return 0;
    for (int i = 0; i < 6; i++)
        if (!((x[i] >= 'a' && x[i] <= 'z') || (x[i] >= 'A' && x[i] <= 'Z') || (x[i] >= '0' && x[i] <= '9')))
            return 0;
    return 1;
}

/* Removes stale temporaries of path (see above); never follows links. */
static void remove_stale_tmps(const char *path) {
    char *d = dck_strdup(path), *b = dck_strdup(path);
    if (!d || !b) goto out;
    const char *dir = dirname(d), *base = basename(b);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) goto out;
    DIR *dh = fdopendir(dfd);
    if (!dh) {
        close(dfd);
        goto out;
    }
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(dh))) {
        struct stat st;
        if (!is_our_tmp(e->d_name, base)) continue;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        if (now - st.st_mtime < STALE_TMP_SECONDS) continue;
        unlinkat(dfd, e->d_name, 0);
    }
    closedir(dh);
out:
    free(d);
    free(b);
}

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
    struct stat st;
    mode_t mode = stat(path, &st) == 0 && S_ISREG(st.st_mode) ? (st.st_mode & 07777)
                                                              : (0666 & ~current_umask());
    fchmod(af->fd, mode);
    return DCK_OK;
}

dck_status dck_atomic_write(dck_atomic_file *af, const void *data, size_t len) {
    const uint8_t *p = data;
    while (len) {
        ssize_t r = fault_now() ? -1 : write(af->fd, p, len);
        if (r < 0) {
            if (errno == EINTR) continue;
            return dck_set_error(DCK_ERR_IO, "%s: write error: %s", af->path, strerror(errno));
        }
        p += r;
        len -= (size_t)r;
    }
    return DCK_OK;
}

static void output_appears_hook(const char *path) {
    const char *t = getenv("DCK_TEST_OUTPUT_APPEARS");
    if (!t || strcmp(t, path)) return;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return;
    static const char text[] = "a user's file\n";
    if (write(fd, text, sizeof text - 1) < 0) { /* the test sees the file's bytes */
    }
    close(fd);
}

/* rename(from, to) that never replaces: renameat2's RENAME_NOREPLACE, or
 * where the file system refuses it, link(2) (which never replaces) and the
 * unlink of from. -1 with errno EEXIST when something is at to. */
static int rename_new(const char *from, const char *to) {
#ifdef RENAME_NOREPLACE
    if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) return -1;
#endif
    if (link(from, to) != 0) return -1;
    unlink(from);
    return 0;
}

static dck_status commit(dck_atomic_file *af, bool replace) {
    dck_status s = DCK_OK;
    if (fault_now() || fsync(af->fd) != 0)
        s = dck_set_error(DCK_ERR_IO, "%s: fsync failed: %s", af->path, strerror(errno));
    if (close(af->fd) != 0 && !s)
        s = dck_set_error(DCK_ERR_IO, "%s: close failed: %s", af->path, strerror(errno));
    af->fd = -1;
    if (!s) output_appears_hook(af->path);
    if (!s && (fault_now() || (replace ? rename(af->tmp, af->path) : rename_new(af->tmp, af->path)) != 0))
        s = !replace && errno == EEXIST
                ? dck_set_error(DCK_ERR_INVALID, "%s: a file appeared there after the last check (detcheck did "
                                                 "not write it); refusing to replace it", af->path)
                : dck_set_error(DCK_ERR_IO, "%s: rename failed: %s", af->path, strerror(errno));
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
        remove_stale_tmps(af->path);
    }
    free(af->path);
    free(af->tmp);
    af->path = af->tmp = NULL;
    return s;
}

dck_status dck_atomic_commit(dck_atomic_file *af) { return commit(af, true); }
dck_status dck_atomic_commit_new(dck_atomic_file *af) { return commit(af, false); }

dck_status dck_output_commit(dck_atomic_file *af, const char *option, const char *what, dck_output_kind same_kind,
                             const char *const *inputs, size_t ninputs) {
    struct stat st;
    /* nothing there at the check: nothing may be replaced after it */
    bool absent = lstat(af->path, &st) != 0 && errno == ENOENT;
    dck_status s = dck_output_check(option, af->path, what, same_kind, inputs, ninputs);
    if (s) {
        dck_atomic_abort(af);
        return s;
    }
    return commit(af, !absent);
}

void dck_atomic_abort(dck_atomic_file *af) {
    if (af->fd >= 0) close(af->fd);
    af->fd = -1;
    if (af->tmp) unlink(af->tmp);
    free(af->path);
    free(af->tmp);
    af->path = af->tmp = NULL;
}

/* ------------------------------------------------------------------ side files */

uint64_t dck_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

dck_status dck_src_run(const char *path, const uint8_t *data, size_t len,
                       dck_status (*parse)(dck_src *, void *), void *ctx) {
    int fd = -1;
    struct stat sb;
    if (!data) DCK_TRY(dck_open_regular(path, &fd, &sb)); /* a FIFO or a device would block or never end */
    dck_src *s = calloc(1, sizeof *s);
    if (!s) {
        if (fd >= 0) close(fd);
        return dck_oom(path);
    }
    s->path = path;
    s->fd = fd;
    s->mem = data;
    s->size = data ? (uint64_t)len : (uint64_t)sb.st_size;
    dck_status st = parse(s, ctx);
    free(s);
    if (fd >= 0) close(fd);
    return st;
}

dck_status dck_src_take(dck_src *s, uint8_t *dst, size_t n, size_t *got) {
    *got = 0;
    while (*got < n && s->pos < s->size) {
        size_t k;
        if (s->fd < 0) {
            k = s->size - s->pos < n - *got ? (size_t)(s->size - s->pos) : n - *got;
            memcpy(dst + *got, s->mem + s->pos, k);
        } else {
            if (s->at == s->have) {
                uint64_t left = s->size - s->read_end;
                size_t want = left < sizeof s->buf ? (size_t)left : sizeof s->buf;
                ssize_t r = read(s->fd, s->buf, want);
                if (r < 0 && errno == EINTR) continue;
                if (r < 0) return dck_set_error(DCK_ERR_IO, "%s: byte %llu: cannot read: %s", s->path,
                                                (unsigned long long)s->pos, strerror(errno));
                if (r == 0) { /* shrank while read: what is left is the end */
                    s->size = s->pos;
                    break;
                }
                s->at = 0;
                s->have = (size_t)r;
                s->read_end += (uint64_t)r;
            }
            k = s->have - s->at < n - *got ? s->have - s->at : n - *got;
            memcpy(dst + *got, s->buf + s->at, k);
            s->at += k;
        }
        s->pos += k;
        *got += k;
    }
    return DCK_OK;
}

dck_status dck_src_grow(const dck_src *s, void **p, size_t *cap, size_t need, size_t sz) {
    if (dck_grow(p, cap, need, sz)) return dck_oom(s->path);
    return DCK_OK;
}

dck_status dck_output_check(const char *option, const char *path, const char *what,
                            dck_output_kind same_kind, const char *const *inputs, size_t ninputs) {
    const char *opt = option ? option : "", *sp = option ? " " : "";
    if (!path || !*path) return dck_set_error(DCK_ERR_INVALID, "%s needs a file name", option ? option : "output");
    struct stat lst, st;
    if (lstat(path, &lst) != 0) {
        if (errno == ENOENT) return DCK_OK;
        return dck_set_error(DCK_ERR_INVALID, "%s%s%s: cannot stat: %s", opt, sp, path, strerror(errno));
    }
    /* an input reached through a link is still the input */
    if (stat(path, &st) == 0)
        for (size_t i = 0; i < ninputs; i++) {
            struct stat si;
            if (inputs[i] && stat(inputs[i], &si) == 0 && si.st_dev == st.st_dev && si.st_ino == st.st_ino)
                return dck_set_error(DCK_ERR_INVALID, "%s%s%s is also an input (%s); refusing to overwrite it",
                                     opt, sp, path, inputs[i]);
        }
    if (!S_ISREG(lst.st_mode))
        return dck_set_error(DCK_ERR_INVALID, "%s%s%s is %s, not a regular file; refusing to replace it", opt, sp,
                             path, dck_file_type_name(lst.st_mode));
    /* root may write anything: the mode bits say what the owner meant */
    if (!(lst.st_mode & 0222) || access(path, W_OK) != 0)
        return dck_set_error(DCK_ERR_INVALID, "%s%s%s is read-only; refusing to replace it", opt, sp, path);
    if (lst.st_size > 0 && !(same_kind && same_kind(path)))
        return dck_set_error(DCK_ERR_INVALID, "%s%s%s exists and is not a %s; refusing to overwrite it", opt, sp,
                             path, what);
    return DCK_OK;
}

dck_status dck_output_write(const char *option, const char *path, const char *what, dck_output_kind same_kind,
                            const char *const *inputs, size_t ninputs, const void *data, size_t len) {
    dck_atomic_file af;
    DCK_TRY(dck_atomic_open(path, &af));
    dck_status s = dck_atomic_write(&af, data, len);
    if (s) {
        dck_atomic_abort(&af);
        return s;
    }
    return dck_output_commit(&af, option, what, same_kind, inputs, ninputs);
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

/* Shared by the fuzz targets: hash the input as a whole file through the
 * public open path (format sniffing, reader, hashing engine). */
#ifndef DCK_FUZZ_UTIL_H
#define DCK_FUZZ_UTIL_H
#include "detcheck.h"

#include <stdio.h>
#include <unistd.h>

/* Hashes one path (a file or a checkpoint directory) on one thread,
 * through the public open path; the status is the reader's business. */
static inline void fuzz_hash_path(const char *path) {
    const char *ps[] = {path};
    dck_options o;
    dck_options_init(&o);
    o.threads = 1;
    dck_manifest *m = NULL;
    if (dck_hash_paths(ps, 1, &o, &m) == DCK_OK) dck_manifest_free(m);
}

/* Writes data to path; 0 when it could not. */
static inline int fuzz_write(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    return 1;
}

/* Writes data to a per-process temporary file named with suffix and hashes it. */
static inline void fuzz_hash_as_file(const uint8_t *data, size_t size, const char *suffix) {
    static char path[256];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/dck-fuzz-%d%s", (int)getpid(), suffix);
    if (fuzz_write(path, data, size)) fuzz_hash_path(path);
}
#endif

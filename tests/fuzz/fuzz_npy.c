/* libFuzzer target: the .npy header parser, then the NumPy reader and
 * hashing on the same bytes as a file. */
#include "readers.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dck_dtype dt;
    bool bs, fo;
    int nd;
    uint64_t shape[DCK_MAX_DIMS], off;
    if (dck_npy_parse_header(data, size, "fuzz.npy", &dt, &bs, &fo, &nd, shape, &off) == DCK_OK &&
        (off > size || nd > DCK_MAX_DIMS))
        abort();
    static char path[256];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/dck-fuzz-npy-%d.npy", (int)getpid());
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    fwrite(data, 1, size, f);
    fclose(f);
    const char *ps[] = {path};
    dck_options o;
    dck_options_init(&o);
    o.threads = 1;
    dck_manifest *m = NULL;
    if (dck_hash_paths(ps, 1, &o, &m) == DCK_OK) dck_manifest_free(m);
    return 0;
}

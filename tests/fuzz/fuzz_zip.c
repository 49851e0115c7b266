/* libFuzzer target: the zip directory parser and inflater, then the whole
 * torch.save / .npz reader and hashing on the same bytes as a file. */
#include "zip.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dck_zip z;
    if (dck_zip_open(data, size, "fuzz.zip", &z) == DCK_OK) {
        for (size_t i = 0; i < z.n; i++) {
            const dck_zip_entry *e = &z.entries[i];
            if (e->usize > ((uint64_t)1 << 20)) continue;
            void *buf = malloc(e->usize ? (size_t)e->usize : 1);
            if (buf) dck_zip_extract(e, data, buf, "fuzz.zip");
            free(buf);
            if (dck_zip_find(&z, e->name) == NULL) abort();
        }
        dck_zip_free(&z);
    }
    static char path[256];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/dck-fuzz-zip-%d.pt", (int)getpid());
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

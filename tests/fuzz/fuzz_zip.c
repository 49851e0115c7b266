/* libFuzzer target: the zip directory parser and inflater, then the whole
 * torch.save / .npz reader and hashing on the same bytes as a file. */
#include "fuzz_util.h"
#include "common/zip.h"

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
    fuzz_hash_as_file(data, size, ".pt");
    return 0;
}

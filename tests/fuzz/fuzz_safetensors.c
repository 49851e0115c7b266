/* libFuzzer target: the safetensors header parser, through the public open
 * path (the input is a whole file: length, header, data) and hashing. */
#include "detcheck.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[256];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/dck-fuzz-st-%d.safetensors", (int)getpid());
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

/* libFuzzer target: the manifest parser (YAML and JSON). */
#include "detcheck.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dck_manifest *m = NULL;
    if (dck_manifest_parse((const char *)data, size, "fuzz", &m) == DCK_OK) {
        FILE *f = fopen("/dev/null", "w");
        if (f) {
            dck_manifest_write(m, DCK_FORMAT_YAML, f);
            dck_manifest_write(m, DCK_FORMAT_JSON, f);
            fclose(f);
        }
        dck_manifest_free(m);
    }
    return 0;
}

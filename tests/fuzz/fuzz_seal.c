/* libFuzzer target: the seal loader (runs/seal.c, detcheck-seal(1)) on the
 * input as a file. It loads exactly the manifests that say seal: 1, refuses
 * every other one with the message naming the file, and the step a loaded
 * seal's checkpoint name says is read without a fault. */
#include "detcheck.h"
#include "runs/seal.h"
#include "fuzz_util.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[256];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/dck-fuzz-%d.detcheck-seal.yaml", (int)getpid());
    if (!fuzz_write(path, data, size)) return 0;
    dck_manifest *plain = NULL, *seal = NULL;
    dck_status sp = dck_manifest_load(path, &plain);
    dck_status ss = dck_seal_load(path, &seal);
    const char *v = plain ? dck_manifest_get_meta(plain, "seal") : NULL;
    int want = sp == DCK_OK && v && !strcmp(v, "1");
    if ((ss == DCK_OK) != want) {
        fprintf(stderr, "seal load %d, manifest load %d with seal '%s'\n", (int)ss, (int)sp, v ? v : "(none)");
        abort();
    }
    if (ss != DCK_OK && !strstr(dck_last_error(), path)) {
        fprintf(stderr, "the refusal does not name the file: %s\n", dck_last_error());
        abort();
    }
    if (seal) {
        const char *name = dck_manifest_get_meta(seal, "seal_checkpoint");
        long long step;
        if (name) dck_seal_name_step(name, &step);
        if (!dck_digest_equal(dck_manifest_root(seal), dck_manifest_root(plain))) abort();
    }
    dck_manifest_free(plain);
    dck_manifest_free(seal);
    return 0;
}

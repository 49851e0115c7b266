/* libFuzzer target: the torch.distributed.checkpoint reader (its .metadata:
 * the pickled plan, storage entries, chunk offsets, and Megatron-Core's
 * mcore_data with the flattened-range rules), through the public open
 * path: the input is a directory's .metadata, beside one data file of fixed
 * bytes (__0_0.distcp) that its storage entries may point into, and the
 * metadata.json that marks a Megatron-Core directory (the dp_reshardable
 * bucket rule and master-weight names apply). Whatever
 * the plan says, reading must stay inside that file and end in a status. */
#include "detcheck.h"
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dir_path(void) {
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/dck-fuzz-dcp-%d", (int)getpid());
        mkdir(dir, 0700);
        char p[300];
        snprintf(p, sizeof p, "%s/__0_0.distcp", dir);
        FILE *f = fopen(p, "wb");
        if (f) {
            /* 1 MiB of varied bytes: float patterns, zeros and NaNs all occur */
            for (unsigned i = 0; i < (1u << 20); i++) fputc((int)((i * 2654435761u) >> 13) & 0xff, f);
            fclose(f);
        }
        /* Megatron-Core's mark (0.16 on has no mcore_data): its rules apply */
        snprintf(p, sizeof p, "%s/metadata.json", dir);
        f = fopen(p, "wb");
        if (f) {
            fputs("{\"sharded_backend\": \"torch_dist\", \"sharded_backend_version\": 1}\n", f);
            fclose(f);
        }
    }
    return dir;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = dir_path();
    char p[300];
    snprintf(p, sizeof p, "%s/.metadata", dir);
    if (fuzz_write(p, data, size)) fuzz_hash_path(dir);
    return 0;
}

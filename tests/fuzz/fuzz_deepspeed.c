/* libFuzzer target: the DeepSpeed reader's reading of a ZeRO optimizer
 * file's structure (zero_stage, partition_count, the flat partitions and
 * each group's state, param_alignment_paddings) against the model file's
 * param_shapes, through the public open path. The input is the pickle
 * (data.pkl) of rank 0's zero_pp_rank_0_mp_rank_00_optim_states.pt: the
 * harness wraps it in a torch.save zip whose storages archive/data/0 to 15
 * hold 64 KiB of fixed bytes each, beside fixed model files (the ZeRO-1
 * fixture's mp_rank_00_model_states.pt for stages 1/2, the ZeRO-3 one's
 * rank 0 model file for stage 3; copied from the source tree: run from the
 * project root, as tests/fuzz/run.sh does). Whatever the pickle says,
 * reading must stay inside the files and end in a status. */
#include "detcheck.h"
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MODEL_SRC "tests/fixtures/mcore/ds_zero1_dp1/global_step3/mp_rank_00_model_states.pt"
#define ZMODEL_SRC "tests/fixtures/mcore/ds_zero3_dp2/global_step3/zero_pp_rank_0_mp_rank_00_model_states.pt"
#define NSTORAGES 16
#define STORAGE_BYTES (64u << 10)

static const char *dir_path(void) {
    static char dir[256];
    static int ready = -1;
    if (ready < 0) {
        ready = 0;
        snprintf(dir, sizeof dir, "/tmp/dck-fuzz-ds-%d", (int)getpid());
        mkdir(dir, 0700);
        static const char *const src[][2] = {{MODEL_SRC, "mp_rank_00_model_states.pt"},
                                             {ZMODEL_SRC, "zero_pp_rank_0_mp_rank_00_model_states.pt"}};
        for (size_t i = 0; i < sizeof src / sizeof src[0]; i++) {
            FILE *in = fopen(src[i][0], "rb");
            if (!in) return NULL;
            static uint8_t buf[1 << 20];
            size_t n = fread(buf, 1, sizeof buf, in);
            fclose(in);
            char p[300];
            snprintf(p, sizeof p, "%s/%s", dir, src[i][1]);
            if (!fuzz_write(p, buf, n)) return NULL;
        }
        ready = 1;
    }
    return ready ? dir : NULL;
}

static void put16(uint8_t *p, unsigned v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
    put16(p, v & 0xffff);
    put16(p + 2, v >> 16);
}

typedef struct {
    uint8_t *buf;
    size_t len;
    uint8_t cd[NSTORAGES + 1][46 + 64];
    size_t cdlen[NSTORAGES + 1];
    size_t n;
} zipw;

/* One stored entry: local header, data; its central record kept. */
static void entry(zipw *z, const char *name, const uint8_t *data, size_t len) {
    size_t nl = strlen(name);
    uint32_t crc = (uint32_t)crc32(0, data, (uInt)len);
    uint8_t *h = z->buf + z->len;
    memset(h, 0, 30);
    put32(h, 0x04034b50);
    put16(h + 4, 20);
    put32(h + 14, crc);
    put32(h + 18, (uint32_t)len);
    put32(h + 22, (uint32_t)len);
    put16(h + 26, (unsigned)nl);
    memcpy(h + 30, name, nl);
    memcpy(h + 30 + nl, data, len);
    uint8_t *c = z->cd[z->n];
    memset(c, 0, 46);
    put32(c, 0x02014b50);
    put16(c + 4, 20);
    put16(c + 6, 20);
    put32(c + 16, crc);
    put32(c + 20, (uint32_t)len);
    put32(c + 24, (uint32_t)len);
    put16(c + 28, (unsigned)nl);
    put32(c + 42, (uint32_t)z->len);
    memcpy(c + 46, name, nl);
    z->cdlen[z->n++] = 46 + nl;
    z->len += 30 + nl + len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = dir_path();
    if (!dir) return 0;
    static uint8_t *storage;
    if (!storage && (storage = malloc(STORAGE_BYTES)))
        for (unsigned i = 0; i < STORAGE_BYTES; i++) storage[i] = (uint8_t)((i * 2654435761u) >> 13);
    if (!storage) return 0;
    zipw z;
    memset(&z, 0, sizeof z);
    size_t cap = size + NSTORAGES * (STORAGE_BYTES + 128) + 4096;
    if (!(z.buf = malloc(cap))) return 0;
    entry(&z, "archive/data.pkl", data, size);
    for (int i = 0; i < NSTORAGES; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "archive/data/%d", i);
        entry(&z, nm, storage, STORAGE_BYTES);
    }
    size_t cd = z.len;
    for (size_t i = 0; i < z.n; i++) {
        memcpy(z.buf + z.len, z.cd[i], z.cdlen[i]);
        z.len += z.cdlen[i];
    }
    uint8_t *e = z.buf + z.len;
    memset(e, 0, 22);
    put32(e, 0x06054b50);
    put16(e + 8, (unsigned)z.n);
    put16(e + 10, (unsigned)z.n);
    put32(e + 12, (uint32_t)(z.len - cd));
    put32(e + 16, (uint32_t)cd);
    z.len += 22;
    char p[300];
    snprintf(p, sizeof p, "%s/zero_pp_rank_0_mp_rank_00_optim_states.pt", dir);
    if (fuzz_write(p, z.buf, z.len)) fuzz_hash_path(dir);
    free(z.buf);
    return 0;
}

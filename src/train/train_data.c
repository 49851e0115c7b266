/* Training data. The synthetic task is a Markov chain over the vocabulary:
 * each token has four successors (chosen by Philox from the seed) taken with
 * probabilities 1/2, 1/4, 1/8, 1/8, so the best loss is 1.75 bits per token
 * against log(vocab) at the start. A real token file (uint16, little-endian)
 * is sampled at offsets drawn from Philox. Either way sample g depends only
 * on (seed, g): any step can be produced without replay. */
#include "train/train.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DATA_STREAM 0xDA7Au
#define CHAIN_STREAM 0xC4A1u

struct dck_data {
    int vocab, seq;
    uint64_t seed;
    const uint16_t *tokens; /* mapped file, or NULL */
    size_t ntokens;
    size_t map_len;
};

dck_status dck_data_open(const dck_train_config *cfg, dck_data **out) {
    *out = NULL;
    dck_data *d = dck_xcalloc(1, sizeof *d);
    if (!d) return dck_oom("train");
    d->vocab = cfg->vocab;
    d->seq = cfg->seq;
    d->seed = cfg->seed;
    if (cfg->data[0]) {
        const char *path = cfg->data;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            free(d);
            return dck_set_error(DCK_ERR_IO, "%s: %s", path, strerror(errno));
        }
        struct stat st;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            free(d);
            return dck_set_error(DCK_ERR_IO, "%s: not a regular file", path);
        }
        if (st.st_size % 2 != 0) {
            close(fd);
            free(d);
            return dck_set_error(DCK_ERR_FORMAT,
                                 "%s: %lld bytes is not a whole number of uint16 tokens", path,
                                 (long long)st.st_size);
        }
        size_t n = (size_t)st.st_size / 2;
        if (n < (size_t)cfg->seq + 2) {
            close(fd);
            free(d);
            return dck_set_error(DCK_ERR_FORMAT,
                                 "%s: %zu tokens, need at least seq+2 = %d", path, n,
                                 cfg->seq + 2);
        }
        void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        close(fd);
        if (map == MAP_FAILED) {
            free(d);
            return dck_set_error(DCK_ERR_IO, "%s: mmap: %s", path, strerror(errno));
        }
        d->tokens = map;
        d->ntokens = n;
        d->map_len = (size_t)st.st_size;
        /* every token must index the embedding */
        for (size_t i = 0; i < n; i++) {
            uint16_t t = (uint16_t)(((const uint8_t *)map)[2 * i] |
                                    ((const uint8_t *)map)[2 * i + 1] << 8);
            if (t >= cfg->vocab) {
                dck_data_free(d);
                return dck_set_error(DCK_ERR_FORMAT,
                                     "%s: token %u at index %zu is outside the vocabulary (%d); "
                                     "raise --vocab",
                                     path, t, i, cfg->vocab);
            }
        }
    }
    *out = d;
    return DCK_OK;
}

void dck_data_free(dck_data *d) {
    if (!d) return;
    if (d->tokens) munmap((void *)d->tokens, d->map_len);
    free(d);
}

static uint16_t successor(const dck_data *d, uint32_t tok, uint32_t r) {
    /* r < 2^31: choice 0; < 3 2^30: 1; < 7 2^29: 2; else 3 */
    uint32_t c = r < 0x80000000u ? 0 : r < 0xC0000000u ? 1 : r < 0xE0000000u ? 2 : 3;
    return (uint16_t)(dck_philox_u32(d->seed, tok, c, CHAIN_STREAM, 0) % (uint32_t)d->vocab);
}

void dck_data_sample(const dck_data *d, uint64_t g, uint16_t *tokens) {
    uint32_t g0 = (uint32_t)g, g1 = (uint32_t)(g >> 32);
    size_t n = (size_t)d->seq + 1;
    if (d->tokens) {
        uint64_t span = d->ntokens - n + 1;
        uint64_t r = ((uint64_t)dck_philox_u32(d->seed, g0, g1, DATA_STREAM, 1) << 32) |
                     dck_philox_u32(d->seed, g0, g1, DATA_STREAM, 2);
        size_t at = (size_t)(r % span);
        const uint8_t *b = (const uint8_t *)d->tokens;
        for (size_t i = 0; i < n; i++)
            tokens[i] = (uint16_t)(b[2 * (at + i)] | b[2 * (at + i) + 1] << 8);
        return;
    }
    tokens[0] = (uint16_t)(dck_philox_u32(d->seed, g0, g1, DATA_STREAM, 0) % (uint32_t)d->vocab);
    for (size_t i = 1; i < n; i++) {
        dck_philox_ctr c = {{g0, g1, DATA_STREAM, 0x10000u + (uint32_t)i}};
        uint32_t r = dck_philox4x32(c, (uint32_t)d->seed, (uint32_t)(d->seed >> 32)).v[0];
        tokens[i] = successor(d, tokens[i - 1], r);
    }
}

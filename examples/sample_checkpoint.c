/* Writes a small sample checkpoint with libdetcheck: a two-layer model's
 * weights, AdamW moments and an RNG state, as two shards in detcheck's
 * sharded layout (each weight split along dim 0), plus the same tensors
 * unsharded. Used by `make demo`.
 *
 *   sample_checkpoint DIR
 */
#include <detcheck_static.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_T 16

static uint16_t bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: sample_checkpoint DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    char path[4096];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/sharded", dir);
    mkdir(path, 0755);
    dck_st_tensor full[MAX_T], shard[2][MAX_T];
    void *bufs[MAX_T];
    int n = 0;
    const int rows = 64, cols = 96;
    uint32_t x = 12345;
    for (int layer = 0; layer < 2; layer++) {
        static const char *kinds[] = {"model.layers.%d.mlp.weight", "optimizer.state.%d.exp_avg",
                                      "optimizer.state.%d.exp_avg_sq"};
        for (int k = 0; k < 3; k++) {
            char *name = malloc(64);
            snprintf(name, 64, kinds[k], layer);
            uint16_t *w = malloc(sizeof *w * (size_t)rows * (size_t)cols);
            for (int i = 0; i < rows * cols; i++) {
                x = x * 1664525u + 1013904223u;
                w[i] = bf16(((float)(x >> 8) / 16777216.0f - 0.5f) * (k == 2 ? 1e-4f : 0.1f));
            }
            bufs[n] = w;
            full[n] = (dck_st_tensor){.name = name, .dtype = DCK_BF16, .ndim = 2, .shape = {(uint64_t)rows, (uint64_t)cols}, .data = w};
            for (int s = 0; s < 2; s++) {
                shard[s][n] = full[n];
                shard[s][n].shape[0] = (uint64_t)rows / 2;
                shard[s][n].data = w + (size_t)s * (size_t)(rows / 2) * (size_t)cols;
                shard[s][n].global_ndim = 2;
                shard[s][n].global_shape[0] = (uint64_t)rows;
                shard[s][n].global_shape[1] = (uint64_t)cols;
                shard[s][n].offset[0] = (uint64_t)(s * rows / 2);
                shard[s][n].offset[1] = 0;
            }
            n++;
        }
    }
    uint8_t *rng = malloc(5056);
    for (int i = 0; i < 5056; i++) rng[i] = (uint8_t)(i * 31 + 7);
    bufs[n] = rng;
    full[n] = (dck_st_tensor){.name = "rng_state.torch_cpu", .dtype = DCK_U8, .ndim = 1, .shape = {5056}, .data = rng};
    int nfull = n + 1;
    dck_kv meta[] = {{"format", "pt"}};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    dck_status s = dck_safetensors_write(path, full, (size_t)nfull, meta, 1, 0);
    for (int r = 0; r < 2 && !s; r++) {
        dck_st_tensor t[MAX_T];
        int m = 0;
        for (int i = 0; i < n; i++) t[m++] = shard[r][i];
        if (r == 0) t[m++] = full[n]; /* the RNG state lives on rank 0 */
        snprintf(path, sizeof path, "%s/sharded/rank%d.safetensors", dir, r);
        s = dck_safetensors_write(path, t, (size_t)m, NULL, 0, 0);
    }
    for (int i = 0; i < nfull; i++) {
        if (i < n) free((char *)full[i].name);
        free(bufs[i]);
    }
    if (s) {
        fprintf(stderr, "sample_checkpoint: %s\n", dck_last_error());
        return 2;
    }
    return 0;
}

/* Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and
 * Shaw (SC'11), as in Random123 and cuRAND: any sample of any step is
 * produced from its index alone, so ranks never replay or share a stream. */
#include "train/train.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

dck_philox_ctr dck_philox4x32(dck_philox_ctr c, uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)PHILOX_M0 * c.v[0];
        uint64_t p1 = (uint64_t)PHILOX_M1 * c.v[2];
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        dck_philox_ctr n;
        n.v[0] = hi1 ^ c.v[1] ^ k0;
        n.v[1] = lo1;
        n.v[2] = hi0 ^ c.v[3] ^ k1;
        n.v[3] = lo0;
        c = n;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    return c;
}

uint32_t dck_philox_u32(uint64_t seed, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    dck_philox_ctr ctr = {{a, b, c, d}};
    return dck_philox4x32(ctr, (uint32_t)seed, (uint32_t)(seed >> 32)).v[0];
}

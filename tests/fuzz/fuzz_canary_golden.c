/* libFuzzer target: the canary golden parser (dck_canary_golden_parse,
 * src/train/canary_golden.c), which reads files written elsewhere, bounded. Every
 * input either parses, with counts that agree with each other and with
 * the text's size (the parser keeps at most about the text's size again),
 * or fails with a message that names the label and a line. */
#include "train/canary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dck_canary_golden g;
    dck_status s = dck_canary_golden_parse((const char *)data, size, "fuzz", &g);
    if (s) {
        if (strncmp(dck_last_error(), "fuzz:", 5) != 0 && s != DCK_ERR_NOMEM) {
            fprintf(stderr, "message without the label and line: %s\n", dck_last_error());
            abort();
        }
        if (g.roots || g.digests || g.names || g.config) abort(); /* released on failure */
        return 0;
    }
    if (g.steps < 1 || g.steps > DCK_CANARY_MAX_STEPS || g.ntensors == 0 || !g.config || !g.names ||
        !g.roots || !g.digests)
        abort();
    /* each digest took 34 bytes of the text at least */
    size_t ndigests = (size_t)g.steps * (1 + DCK_TAP_RECORDED * g.ntensors);
    if (ndigests * 34 > size) abort();
    const char *n = g.names;
    for (size_t i = 0; i < g.ntensors; i++) n += strlen(n) + 1;
    if ((size_t)(n - g.names) > size) abort();
    dck_canary_golden_release(&g);
    return 0;
}

/* libFuzzer target: the .npy header parser, then the NumPy reader and
 * hashing on the same bytes as a file. */
#include "fuzz_util.h"
#include "formats/readers.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dck_dtype dt;
    bool bs, fo;
    int nd;
    uint64_t shape[DCK_MAX_DIMS], off;
    if (dck_npy_parse_header(data, size, "fuzz.npy", &dt, &bs, &fo, &nd, shape, &off) == DCK_OK &&
        (off > size || nd > DCK_MAX_DIMS))
        abort();
    fuzz_hash_as_file(data, size, ".npy");
    return 0;
}

/* libFuzzer target: the safetensors header parser, through the public open
 * path (the input is a whole file: length, header, data) and hashing. */
#include "detcheck.h"
#include "fuzz_util.h"
#include "formats/formats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_hash_as_file(data, size, ".safetensors");
    return 0;
}

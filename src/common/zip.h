/* A read-only zip directory parser over bytes in memory (a mapped file or a
 * byte range inside one). Sizes and offsets come from the central directory
 * (local headers with data descriptors carry zeros); zip64 end records and
 * extra fields are honoured. Stored entries are used in place (zero-copy);
 * deflated entries can be inflated into a caller's buffer. */
#ifndef DCK_ZIP_H
#define DCK_ZIP_H

#include "common/common.h"

#define DCK_ZIP_MAX_ENTRIES ((size_t)1 << 22)

typedef struct {
    char *name;            /* NUL-terminated */
    uint16_t method;       /* 0 stored, 8 deflated */
    uint16_t flags;
    uint32_t crc;
    uint64_t csize, usize; /* compressed and uncompressed sizes */
    uint64_t data_offset;  /* offset of the (compressed) data in the buffer */
} dck_zip_entry;

typedef struct {
    dck_zip_entry *entries;
    size_t n;
    size_t *sorted; /* entry indices sorted by name */
} dck_zip;

/* label names the archive in messages. */
dck_status dck_zip_open(const uint8_t *data, uint64_t len, const char *label, dck_zip *out);
void dck_zip_free(dck_zip *z);
const dck_zip_entry *dck_zip_find(const dck_zip *z, const char *name);
/* Inflates a deflated (or copies a stored) entry into out (e->usize bytes)
 * and checks its CRC-32. */
dck_status dck_zip_extract(const dck_zip_entry *e, const uint8_t *data, void *out, const char *label);
/* The same in pieces of at most 1 MiB handed to sink (at increasing output
 * offsets), so that memory does not grow with the entry. */
typedef dck_status (*dck_zip_sink)(void *ctx, uint64_t off, const void *data, size_t len);
dck_status dck_zip_extract_stream(const dck_zip_entry *e, const uint8_t *data, dck_zip_sink sink,
                                  void *ctx, const char *label);

/* Deflate cannot compress more than 1032:1; larger claims are malformed. */
#define DCK_ZIP_MAX_RATIO 1032u

#endif

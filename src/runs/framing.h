/* The framing detcheck's two binary recording files share: the tensor
 * digests (tensor_digests.bin, recording.h) and the traces (trace.bin,
 * trace.h) the Python Recorder writes next to a trajectory (man
 * detcheck-bisect(1), RECORDED RUNS and TRACE FILES; all integers
 * little-endian):
 *   header  8-byte magic | u32 version | u32 flags (0)
 *   records u8 type, then
 *     1 NAME  u32 id (counting up from 0) | [u8 kind] | u16 length | name
 *     2 STEP  the format's own body (its read_step)
 * One parser for both: the header is checked before anything else; the
 * file is streamed (dck_src), never past the size it had when opened; a
 * record that runs to the end of the file is torn (a killed run) and
 * dropped, but what it holds is still checked; anything else malformed is
 * an error naming the file and the byte offset. A name is UTF-8 without
 * NUL bytes (names are compared, sorted and printed as C strings, and
 * reports carry them as UTF-8), at most 65,535 bytes (its length is 16
 * bits), and each (kind, name) is named once. */
#ifndef DCK_RUNS_FRAMING_H
#define DCK_RUNS_FRAMING_H

#include "common/common.h"

/* What sets one file apart from the other: its header, its NAME records'
 * rules and messages, and its STEP records. */
typedef struct {
    const char *magic;       /* 7 characters; the file's 8th byte is NUL */
    const char *file_kind;   /* "not a detcheck FILE_KIND file" */
    uint32_t min_version, max_version;
    uint8_t name_kinds;      /* a NAME record's kind byte after its id is below it; 0: no kind byte */
    bool refuse_empty_names; /* the writer never names anything "" */
    const char *name_label;  /* "LABEL ID is not UTF-8" */
    /* A STEP record after its type byte at offset at, read from s; *torn
     * when the file ends inside it. ctx: dck_frame_read's. */
    dck_status (*read_step)(dck_src *s, void *ctx, uint64_t at, bool *torn);
    /* The failure for ids a < b that name the same (kind and) name; at_b:
     * the offset of b's record. */
    dck_status (*named_twice)(dck_src *s, void *ctx, uint32_t a, uint32_t b, uint64_t at_b);
} dck_frame_format;

/* Where the NAME records go: the format's own result. kinds is NULL for a
 * format whose names have no kind. */
typedef struct {
    char ***names;
    size_t *nnames;
    uint8_t **kinds;
} dck_frame_names;

/* Reads s as a file of format f: the header (*version set before the
 * first record is read), then every record up to the end or a torn last
 * one, then each name once. What was read stays in names and the format's
 * result on failure too: the caller releases it. */
dck_status dck_frame_read(dck_src *s, const dck_frame_format *f, dck_frame_names names, uint32_t *version,
                          void *ctx);

#endif

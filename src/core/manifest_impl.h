/* What the files of a manifest share inside core/, not exported: the model
 * (struct dck_manifest, manifest.c), its writers (manifest_write.c), its
 * readers (manifest_parse.c), its comparison and layout state
 * (manifest_compare.c), and the YAML scalar rules the direct writer and
 * the reader of the written layout both follow (manifest_yaml.c). */
#ifndef DCK_CORE_MANIFEST_IMPL_H
#define DCK_CORE_MANIFEST_IMPL_H

#include "core/core.h"

#define MANIFEST_VERSION 1

typedef struct {
    char *key, *value;
} meta_kv;

struct dck_manifest {
    dck_manifest_tensor *t;
    size_t nt, cap_t;
    dck_manifest_file *f;
    size_t nf, cap_f;
    dck_manifest_value *v;
    size_t nv, cap_v;
    meta_kv *meta;
    size_t nmeta, cap_meta;
    dck_digest root;
    bool finalized;
    struct name_block *names; /* tensor names and file paths */
};

/* ------------------------------------------------------------------ manifest_yaml.c
 * libyaml's rules for a scalar (0.2.5), on valid UTF-8: the direct writer
 * writes what the emitter would, and the reader of the written layout
 * takes only what the emitter would have written. */

/* libyaml's IS_BREAK: CR, LF, NEL, LS, PS. */
static inline bool y_is_break(const unsigned char *s) {
    return s[0] == '\r' || s[0] == '\n' || (s[0] == 0xC2 && s[1] == 0x85) ||
           (s[0] == 0xE2 && s[1] == 0x80 && (s[2] == 0xA8 || s[2] == 0xA9));
}

/* libyaml's IS_PRINTABLE (0.2.5) on valid UTF-8. */
static inline bool y_printable(const unsigned char *s) {
    unsigned c = s[0];
    return c == 0x0A || (c >= 0x20 && c <= 0x7E) || (c == 0xC2 && s[1] >= 0xA0) || (c > 0xC2 && c < 0xED) ||
           (c == 0xED && s[1] < 0xA0) || c == 0xEE ||
           (c == 0xEF && !(s[1] == 0xBB && s[2] == 0xBF) && !(s[1] == 0xBF && (s[2] == 0xBE || s[2] == 0xBF)));
}

/* How a string may be written: bit 0 valid UTF-8, bit 1 no YAML line break. */
enum { STR_UTF8 = 1, STR_NOBREAK = 2 };
unsigned dck_yaml_str_class(const char *str);

/* The styles yaml_emitter_analyze_scalar allows a non-empty scalar without
 * line breaks (valid UTF-8, NUL-terminated). */
enum { Y_FLOW_PLAIN = 1, Y_BLOCK_PLAIN = 2, Y_SINGLE = 4 };
unsigned dck_yaml_analyze(const unsigned char *s, size_t len);

/* Letters, digits and . _ / - only, not "-", "---..." or "...": plain in
 * both contexts (what most names are, without dck_yaml_analyze). */
bool dck_yaml_all_safe(const unsigned char *s, size_t len);

#endif

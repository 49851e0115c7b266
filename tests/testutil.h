/* Shared helpers for the Check suites. */
#ifndef DCK_TESTUTIL_H
#define DCK_TESTUTIL_H
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "detcheck.h"

/* A fresh temporary directory (removed by rm -rf at tmpdir_free). */
static inline char *tu_tmpdir(void) {
    const char *base = getenv("TMPDIR");
    char *p = malloc(4096);
    snprintf(p, 4096, "%s/dcktest.XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(p)) { free(p); return NULL; }
    return p;
}
static inline void tu_tmpdir_free(char *p) {
    if (!p) return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", p);
    if (system(cmd) != 0) { /* best effort */ }
    free(p);
}
static inline char *tu_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}
static inline void tu_write(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}
static inline char *tu_hex(dck_digest d) {
    static char buf[4][33];
    static int k;
    char *b = buf[k++ & 3];
    dck_digest_to_hex(d, b);
    return b;
}
/* Runs a suite; returns 0 when every test passed. */
static inline int tu_run(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf == 0 ? 0 : 1;
}
/* ../shared/fixtures/public from the project root, or NULL. */
static inline const char *tu_public_fixtures(void) {
    static char p[4096];
    const char *top = getenv("DCK_TOP");
    snprintf(p, sizeof p, "%s/../shared/fixtures/public", top ? top : ".");
    return access(p, R_OK) == 0 ? p : NULL;
}
#endif

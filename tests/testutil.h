/* Shared helpers for the Check suites. */
#ifndef DCK_TESTUTIL_H
#define DCK_TESTUTIL_H
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
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
/* ------------------------------------------------------------------ skips
 * A test that cannot run (a file, tool or device it needs is missing) says
 * so; it never passes silently. TU_SKIP("why %s", ...) in a test prints
 * "SKIP: <test>: <why>", appends "<test>: <why>" to the file named by
 * $DCK_SKIP_LOG and returns from the test. Check runs each test in a forked
 * child, so the parent learns of skips only through that file: tu_run makes
 * one of its own when $DCK_SKIP_LOG is unset (a suite run by hand), and
 * returns 1 when any test failed, else 77 (automake's "skipped") when any
 * test skipped, else 0. tests/run.sh gives each suite a fresh $DCK_SKIP_LOG,
 * counts exit 77 as skipped and lists the file's lines by name. Counting is
 * per suite: one skipped test makes its suite "skipped" (the other tests
 * still run), and a failure makes it "failed" whatever skipped. */
static inline void tu_skip_note(const char *why) {
    const char *test = tcase_name();
    printf("SKIP: %s: %s\n", test ? test : "?", why);
    fflush(stdout);
    const char *log = getenv("DCK_SKIP_LOG");
    FILE *f = log && *log ? fopen(log, "a") : NULL;
    if (f) {
        fprintf(f, "%s: %s\n", test ? test : "?", why);
        fclose(f);
    }
}
#define TU_SKIP(...)                                                                                              \
    do {                                                                                                          \
        char tu_why_[8192];                                                                                       \
        snprintf(tu_why_, sizeof tu_why_, __VA_ARGS__);                                                           \
        tu_skip_note(tu_why_);                                                                                    \
        return;                                                                                                   \
    } while (0)

static inline long tu_file_size(const char *path) {
    struct stat st;
    return path && stat(path, &st) == 0 ? (long)st.st_size : 0;
}

/* Runs a suite; returns 0 when every test passed, 77 when none failed and
 * some skipped, 1 when any failed. */
static inline int tu_run(Suite *s) {
    char own[4096] = "";
    const char *log = getenv("DCK_SKIP_LOG");
    if (!log || !*log) { /* run by hand: a log of our own, inherited by the forked tests */
        const char *base = getenv("TMPDIR");
        snprintf(own, sizeof own, "%s/dckskip.XXXXXX", base && *base ? base : "/tmp");
        int fd = mkstemp(own);
        if (fd < 0) {
            perror("tu_run: skip log");
            return 1;
        }
        close(fd);
        setenv("DCK_SKIP_LOG", own, 1);
        log = own;
    }
    long before = tu_file_size(log);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    int skipped = tu_file_size(log) > before;
    if (*own) {
        unlink(own);
        unsetenv("DCK_SKIP_LOG");
    }
    return nf ? 1 : skipped ? 77 : 0;
}

/* ------------------------------------------------------------------ public fixtures
 * Real files written by other projects: ../shared/fixtures/public beside the
 * project root ($DCK_TOP), or $DCK_PUBLIC_FIXTURES when set (set it to a
 * missing path to run the tests as on a machine without them). */
static inline const char *tu_public_fixtures_path(void) {
    static char p[4096];
    const char *over = getenv("DCK_PUBLIC_FIXTURES");
    const char *top = getenv("DCK_TOP");
    if (over && *over) snprintf(p, sizeof p, "%s", over);
    else snprintf(p, sizeof p, "%s/../shared/fixtures/public", top ? top : ".");
    return p;
}
/* The public fixtures directory, or NULL when it is not there. */
static inline const char *tu_public_fixtures(void) {
    const char *p = tu_public_fixtures_path();
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode) && access(p, R_OK | X_OK) == 0 ? p : NULL;
}
/* $DCK_REQUIRE_FIXTURES set (not empty, not 0): absent public fixtures are
 * a failure, not a skip. .ci/run sets it: in CI they must be there. */
static inline int tu_require_fixtures(void) {
    const char *r = getenv("DCK_REQUIRE_FIXTURES");
    return r && *r && strcmp(r, "0") != 0;
}
/* In a test: const char *VAR = the public fixtures directory; when it is
 * absent the test skips, or fails under DCK_REQUIRE_FIXTURES. */
#define TU_NEED_PUBLIC_FIXTURES(var)                                                                              \
    const char *var = tu_public_fixtures();                                                                       \
    do {                                                                                                          \
        if (!var) {                                                                                               \
            ck_assert_msg(!tu_require_fixtures(), "public fixtures %s absent and DCK_REQUIRE_FIXTURES is set",     \
                          tu_public_fixtures_path());                                                             \
            TU_SKIP("public fixtures %s absent (DCK_REQUIRE_FIXTURES=1 makes this a failure)",                     \
                    tu_public_fixtures_path());                                                                   \
        }                                                                                                         \
    } while (0)
/* n bytes of v, little-endian, at *p (advanced). */
static inline void tu_le(uint8_t **p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) *(*p)++ = (uint8_t)(v >> (8 * i));
}

/* Recorded runs (check_runs_*): tensor_digests.bin in dir: a gradient and a parameter "fc.weight" at
 * steps lo..hi; the parameter's digest at step `odd` changed; with state,
 * a state entry "rng" too */
static inline void tu_write_recording(const char *dir, long lo, long hi, long odd, bool state) {
    uint8_t buf[4096], *p = buf;
    memcpy(p, "DCKTDIG\0", 8);
    p += 8;
    tu_le(&p, 1, 4);
    tu_le(&p, 0, 4);
    static const char *const names[] = {"fc.weight", "fc.weight", "rng"};
    uint32_t ids = state ? 3 : 2;
    for (uint32_t id = 0; id < ids; id++) {
        tu_le(&p, 1, 1);
        tu_le(&p, id, 4);
        tu_le(&p, id, 1); /* kind: 0 gradient, 1 parameter, 3 state */
        if (id == 2) p[-1] = 3;
        tu_le(&p, strlen(names[id]), 2);
        memcpy(p, names[id], strlen(names[id]));
        p += strlen(names[id]);
    }
    for (long s = lo; s <= hi; s++) {
        tu_le(&p, 2, 1);
        tu_le(&p, (uint64_t)s, 8);
        tu_le(&p, ids, 4);
        for (uint32_t id = 0; id < ids; id++) {
            tu_le(&p, id, 4);
            tu_le(&p, 100 + (uint64_t)s, 8);
            tu_le(&p, id == 1 && s == odd ? 7 : 9, 8);
        }
    }
    char *path = tu_path(dir, "tensor_digests.bin");
    tu_write(path, buf, (size_t)(p - buf));
    free(path);
}

/* A run folder NAME made under top (malloc'd path). */
static inline char *tu_run_dir(const char *top, const char *name) {
    char *d = tu_path(top, name);
    ck_assert_int_eq(mkdir(d, 0777), 0);
    return d;
}

#endif

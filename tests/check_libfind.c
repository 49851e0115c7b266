/* The run-time search for CUDA, cuBLAS, NCCL and MPI (src/common/libfind.c),
 * on stub libraries built here with cc, so it runs without a GPU: the order
 * (override > already loaded > NVIDIA wheel > $CONDA_PREFIX/lib > the
 * system's loader path > $CUDA_HOME), the step and real path recorded, the
 * companion (cuBLASLt) loaded first from cuBLAS's folder, the
 * site-packages folders found above the executable's prefix and in
 * $VIRTUAL_ENV, and every place tried, one line each, when nothing loads.
 * Check forks each test: every test starts with nothing loaded. */
#include "testutil.h"
#include "common/libfind.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

static char *tmp;   /* each test's folder */
static char *tmpl;  /* the stubs, built once (cc is the slow part) */

/* Builds tmpl/NAME with soname NAME: dck_stub_id() returns 7; with needs
 * (a stub of tmpl), it links it (NEEDED) and calls its dck_stub_dep(), so
 * it loads only where that very library is found. */
static void build(const char *name, const char *needs) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && printf '%s' > '%s.c' && cc -shared -fPIC -Wl,-soname,%s -o '%s' '%s.c' %s && rm '%s.c'",
             tmpl,
             needs ? "int dck_stub_dep(void); int dck_stub_id(void) { return 7 + dck_stub_dep(); }\\n"
                   : "int dck_stub_dep(void) { return 0; } int dck_stub_id(void) { return 7; }\\n",
             name, name, name, name, needs ? needs : "", name);
    ck_assert_msg(system(cmd) == 0, "cc failed: %s", cmd);
}

static void build_all(void) {
    tmpl = tu_tmpdir();
    ck_assert_ptr_nonnull(tmpl);
    build("libdckfake.so.1", NULL);
    build("libdckfakeLt.so.1", NULL);
    build("libdckfakeblas.so.1", "libdckfakeLt.so.1");
}
static void free_all(void) { tu_tmpdir_free(tmpl); }

/* tmp/DIR/AS: a copy of the stub tmpl/NAME */
static void stub_as(const char *dir, const char *name, const char *as) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/%s' && cp '%s/%s' '%s/%s/%s'", tmp, dir, tmpl, name, tmp, dir, as);
    ck_assert_msg(system(cmd) == 0, "%s", cmd);
}
static void stub(const char *dir, const char *name) { stub_as(dir, name, name); }

static char *at(const char *rel) { return tu_path(tmp, rel); }

/* 7 for a stub, -1 for a real library */
static int id_of(const dck_libfind *f) {
    int (*id)(void);
    void *p = dlsym(f->handle, "dck_stub_id");
    if (!p) return -1;
    memcpy(&id, &p, sizeof p);
    return id();
}

static void clean_env(void) {
    static const char *const vars[] = {"DETCHECK_SITE_PACKAGES", "VIRTUAL_ENV", "CONDA_PREFIX", "CUDA_HOME",
                                       "CUDA_PATH", "PYTHONUSERBASE", "DCK_TEST_LIB", "HOME"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

static void setup(void) {
    clean_env();
    tmp = tu_tmpdir();
    ck_assert_ptr_nonnull(tmp);
    /* the same fake library in every place: its path says which place won */
    stub("site/nvidia/cu99/lib", "libdckfake.so.1");
    stub("site/nvidia/fake/lib", "libdckfake.so.1");
    stub("conda/lib", "libdckfake.so.1");
    stub("cuda/lib64", "libdckfake.so.1");
    stub("cuda/lib", "libdckfake.so.1");
    stub_as("over", "libdckfake.so.1", "libdckfake-other.so");
}

static void teardown(void) {
    tu_tmpdir_free(tmp);
    tmp = NULL;
}

static const dck_libfind_spec fake = {"DCK_TEST_LIB", {"libdckfake.so.1", NULL, NULL},
                                      {"nvidia/cu99/lib", "nvidia/fake/lib", NULL}, NULL, 0, 1};

static void set(const char *var, const char *rel) {
    char *p = at(rel);
    setenv(var, p, 1);
    free(p);
}

/* what loads, and from where, as places are taken away one by one */
START_TEST(order) {
    char *real = realpath(tmp, NULL);
    static const struct {
        const char *from;
        const char *dir; /* under tmp */
    } steps[] = {
        {"DCK_TEST_LIB", "over/libdckfake-other.so"},
        {"NVIDIA wheel", "site/nvidia/cu99/lib/libdckfake.so.1"},
        {"NVIDIA wheel", "site/nvidia/fake/lib/libdckfake.so.1"},
        {"$CONDA_PREFIX/lib", "conda/lib/libdckfake.so.1"},
        {"$CUDA_HOME", "cuda/lib64/libdckfake.so.1"},
        {"$CUDA_HOME", "cuda/lib/libdckfake.so.1"},
    };
    set("DETCHECK_SITE_PACKAGES", "site");
    set("CONDA_PREFIX", "conda");
    set("CUDA_HOME", "cuda");
    set("DCK_TEST_LIB", "over/libdckfake-other.so");
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        dck_libfind f;
        ck_assert_msg(dck_libfind_load(&fake, &f), "step %zu: nothing loaded:\n%s", i, f.tried);
        ck_assert_str_eq(f.from, steps[i].from);
        ck_assert_int_eq(id_of(&f), 7);
        char want[8192];
        snprintf(want, sizeof want, "%s/%s", real, steps[i].dir);
        ck_assert_str_eq(f.path, want);
        dck_libfind_close(&f);
        /* take this place away for the next step */
        char cmd[8400];
        snprintf(cmd, sizeof cmd, "rm -f '%s'", want);
        if (i == 0) unsetenv("DCK_TEST_LIB");
        else ck_assert_int_eq(system(cmd), 0);
    }
    dck_libfind f;
    ck_assert_int_eq(dck_libfind_load(&fake, &f), 0);
    ck_assert_ptr_null(f.handle);
    /* every place said, one line each */
    static const char *const lines[] = {
        "already loaded: not in this process\n",
        "$CONDA_PREFIX/lib: ",
        "system loader path: libdckfake.so.1: cannot open shared object file",
        "$CUDA_HOME: ",
        "$CUDA_PATH: CUDA_PATH not set\n",
    };
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++)
        ck_assert_msg(strstr(f.tried, lines[i]), "'%s' not in:\n%s", lines[i], f.tried);
    ck_assert_msg(strstr(f.tried, "NVIDIA wheel: ") && strstr(f.tried, "nvidia/fake/lib has no libdckfake.so.1"),
                  "%s", f.tried);
    char why[8192];
    dck_libfind_why(&fake, &f, "the fake library", why, sizeof why);
    static const char lead[] = "cannot load the fake library (libdckfake.so.1): already loaded: not in this "
                               "process; NVIDIA wheel: ";
    ck_assert_msg(!strncmp(why, lead, strlen(lead)), "%s", why);
    ck_assert_msg(!strchr(why, '\n'), "%s", why);
    free(real);
}
END_TEST

/* the override is the only place when set: a missing one is an error,
 * never a fall back to a library the user did not name */
START_TEST(override_only) {
    set("DETCHECK_SITE_PACKAGES", "site");
    set("DCK_TEST_LIB", "over/missing.so");
    dck_libfind f;
    ck_assert_int_eq(dck_libfind_load(&fake, &f), 0);
    ck_assert_msg(strstr(f.tried, "DCK_TEST_LIB: ") && strstr(f.tried, "missing.so: cannot open shared object file"),
                  "%s", f.tried);
    ck_assert_ptr_null(strstr(f.tried, "NVIDIA wheel"));
}
END_TEST

/* a library the process has loaded already wins over every folder */
START_TEST(already_loaded_first) {
    char *lib = at("conda/lib/libdckfake.so.1");
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    ck_assert_ptr_nonnull(h);
    set("DETCHECK_SITE_PACKAGES", "site");
    dck_libfind f;
    ck_assert(dck_libfind_load(&fake, &f));
    ck_assert_str_eq(f.from, "already loaded");
    ck_assert_int_eq(id_of(&f), 7);
    char *real = realpath(lib, NULL);
    ck_assert_str_eq(f.path, real);
    free(real);
    free(lib);
    dck_libfind_close(&f);
    dlclose(h);
}
END_TEST

/* Inside a process that loaded the library already (torch's cudart): an
 * override that names the soname reuses that copy, wherever other copies
 * lie; one that names a path loads a second copy from it. So what a torch
 * process is given is the soname (ci/gpu-check.sh: DETCHECK_CUDART_LIB). */
START_TEST(soname_override_reuses_loaded_copy) {
    char *lib = at("conda/lib/libdckfake.so.1");
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    ck_assert_ptr_nonnull(h);
    set("DETCHECK_SITE_PACKAGES", "site");
    setenv("DCK_TEST_LIB", "libdckfake.so.1", 1);
    dck_libfind f;
    ck_assert(dck_libfind_load(&fake, &f));
    char *real = realpath(lib, NULL);
    ck_assert_str_eq(f.path, real);
    ck_assert_ptr_eq(f.handle, h);
    dck_libfind_close(&f);
    /* a path: another copy, the one this rule keeps out of torch processes */
    set("DCK_TEST_LIB", "over/libdckfake-other.so");
    ck_assert(dck_libfind_load(&fake, &f));
    ck_assert_str_ne(f.path, real);
    ck_assert_ptr_ne(f.handle, h);
    dck_libfind_close(&f);
    unsetenv("DCK_TEST_LIB");
    free(real);
    free(lib);
    dlclose(h);
}
END_TEST

/* the system's loader path comes after $CONDA_PREFIX/lib and before
 * $CUDA_HOME: a library every glibc has (libanl.so.1) */
START_TEST(system_between_conda_and_cuda_home) {
    void *probe = dlopen("libanl.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!probe) TU_SKIP("no libanl.so.1 on the loader's path here: %s", dlerror());
    dlclose(probe);
    stub_as("conda2/lib", "libdckfake.so.1", "libanl.so.1");
    stub_as("cuda2/lib64", "libdckfake.so.1", "libanl.so.1");
    const dck_libfind_spec anl = {NULL, {"libanl.so.1", NULL, NULL}, {NULL}, NULL, 0, 1};
    set("CONDA_PREFIX", "conda2");
    set("CUDA_HOME", "cuda2");
    dck_libfind f;
    ck_assert(dck_libfind_load(&anl, &f));
    ck_assert_str_eq(f.from, "$CONDA_PREFIX/lib");
    ck_assert_int_eq(id_of(&f), 7);
    dck_libfind_close(&f);
    unsetenv("CONDA_PREFIX");
    ck_assert(dck_libfind_load(&anl, &f));
    ck_assert_str_eq(f.from, "system loader path");
    ck_assert_int_eq(id_of(&f), -1); /* glibc's, not the stub in $CUDA_HOME */
    ck_assert_msg(strstr(f.path, "libanl"), "%s", f.path);
    ck_assert_msg(strstr(f.tried, "$CONDA_PREFIX/lib: CONDA_PREFIX not set\n"), "%s", f.tried);
    dck_libfind_close(&f);
}
END_TEST

/* cuBLAS needs cuBLASLt and finds it only when it is loaded first from the
 * same folder (a wheel's folder is on no loader path) */
START_TEST(companion_first) {
    stub("site/nvidia/cu99/lib", "libdckfakeLt.so.1");
    stub("site/nvidia/cu99/lib", "libdckfakeblas.so.1");
    set("DETCHECK_SITE_PACKAGES", "site");
    dck_libfind_spec blas = {NULL, {"libdckfakeblas.so.1", NULL, NULL}, {"nvidia/cu99/lib", NULL, NULL}, NULL, 0, 1};
    dck_libfind f;
    /* without the companion: the wheel's cuBLAS cannot load */
    ck_assert_int_eq(dck_libfind_load(&blas, &f), 0);
    ck_assert_msg(strstr(f.tried, "libdckfakeLt.so.1: cannot open shared object file"), "%s", f.tried);
    blas.companion = "libdckfakeLt.so.1";
    ck_assert_msg(dck_libfind_load(&blas, &f), "%s", f.tried);
    ck_assert_str_eq(f.from, "NVIDIA wheel");
    ck_assert_ptr_nonnull(f.companion);
    ck_assert_int_eq(id_of(&f), 7);
    dck_libfind_close(&f);
}
END_TEST

/* site-packages found without DETCHECK_SITE_PACKAGES: $VIRTUAL_ENV's
 * lib/python3.N/site-packages, and the user's base; each folder once */
START_TEST(site_packages_of_a_venv) {
    stub("venv/lib/python3.99/site-packages/nvidia/cu99/lib", "libdckfake.so.1");
    set("VIRTUAL_ENV", "venv");
    dck_libfind f;
    ck_assert_msg(dck_libfind_load(&fake, &f), "%s", f.tried);
    ck_assert_str_eq(f.from, "NVIDIA wheel");
    ck_assert_int_eq(id_of(&f), 7);
    dck_libfind_close(&f);
    unsetenv("VIRTUAL_ENV");
    set("PYTHONUSERBASE", "venv");
    ck_assert_msg(dck_libfind_load(&fake, &f), "%s", f.tried);
    ck_assert_int_eq(id_of(&f), 7);
    dck_libfind_close(&f);
    /* the same folder named three ways is searched once */
    char *site = at("venv/lib/python3.99/site-packages");
    char list[8192];
    snprintf(list, sizeof list, "%s/nowhere:%s:%s/.:%s", tmp, site, site, site);
    setenv("DETCHECK_SITE_PACKAGES", list, 1);
    unlink(f.path);
    ck_assert_int_eq(dck_libfind_load(&fake, &f), 0);
    static const char line[] = "/venv/lib/python3.99/site-packages/nvidia/cu99/lib has no libdckfake.so.1";
    const char *first = strstr(f.tried, line);
    ck_assert_msg(first, "%s", f.tried);
    ck_assert_msg(!strstr(first + 1, line), "searched twice:\n%s", f.tried);
    ck_assert_msg(strstr(f.tried, "NVIDIA wheel: DETCHECK_SITE_PACKAGES names "), "%s", f.tried);
    ck_assert_msg(strstr(f.tried, "/nowhere: no such folder\n"), "%s", f.tried);
    free(site);
}
END_TEST

/* a long list of places ends in "...", never cut in silence */
START_TEST(tried_cut_visibly) {
    char list[16384] = "";
    for (int i = 0; i < 40; i++) {
        char *d = at("");
        char name[256];
        snprintf(name, sizeof name, "a-rather-long-site-packages-folder-name-%02d-%s/nvidia/cu99", i,
                 "made-longer-still-so-that-the-lines-of-32-folders-fill-the-buffer-of-the-places-tried");
        char *s = tu_path(d, name);
        char cmd[8400];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", s);
        ck_assert_int_eq(system(cmd), 0);
        size_t n = strlen(list);
        snprintf(list + n, sizeof list - n, "%s%.*s", n ? ":" : "", (int)(strlen(s) - strlen("/nvidia/cu99")), s);
        free(s);
        free(d);
    }
    setenv("DETCHECK_SITE_PACKAGES", list, 1);
    const dck_libfind_spec none = {NULL, {"libdcknone.so.1", NULL, NULL}, {"nvidia/cu99/lib", NULL, NULL}, NULL, 0, 1};
    dck_libfind f;
    ck_assert_int_eq(dck_libfind_load(&none, &f), 0);
    size_t n = strlen(f.tried);
    ck_assert_uint_lt(n, sizeof f.tried);
    ck_assert_msg(n > 4 && !strcmp(f.tried + n - 4, "...\n"), "%s", f.tried + (n > 200 ? n - 200 : 0));
}
END_TEST

int main(void) {
    Suite *s = suite_create("libfind");
    TCase *tc = tcase_create("search");
    tcase_add_unchecked_fixture(tc, build_all, free_all);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, order);
    tcase_add_test(tc, override_only);
    tcase_add_test(tc, already_loaded_first);
    tcase_add_test(tc, soname_override_reuses_loaded_copy);
    tcase_add_test(tc, system_between_conda_and_cuda_home);
    tcase_add_test(tc, companion_first);
    tcase_add_test(tc, site_packages_of_a_venv);
    tcase_add_test(tc, tried_cut_visibly);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

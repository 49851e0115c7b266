/* The run-time search for CUDA, cuBLAS, NCCL, the driver and MPI (see
 * libfind.h for the order and why). */
#include "common/common.h"
#include "common/libfind.h"

#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A line of the places tried; a full buffer ends in "...\n" (never cut in
 * silence). */
static void note(dck_libfind *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(dck_libfind *f, const char *fmt, ...) {
    static const char cut[] = "...\n";
    enum { CUT = sizeof cut - 1 };
    size_t len = strlen(f->tried);
    if (len >= CUT && !strcmp(f->tried + len - CUT, cut)) return; /* full already */
    size_t room = sizeof f->tried - len - CUT; /* every line leaves room for the mark */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(f->tried + len, room, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n + 2 <= room) {
        memcpy(f->tried + len + n, "\n", 2);
        return;
    }
    size_t end = len + (n < 0 ? 0 : room - 1);
    memcpy(f->tried + end, cut, sizeof cut);
}

static int is_dir(const char *p) {
    struct stat st;
    return p && *p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The real path of a loaded library (what a person can ls), else the name
 * it was opened by. */
static void record(dck_libfind *f, void *h, const char *from, const char *opened) {
    f->handle = h;
    snprintf(f->from, sizeof f->from, "%s", from);
    const char *name = opened;
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name) name = lm->l_name;
    char real[PATH_MAX];
    snprintf(f->path, sizeof f->path, "%s", realpath(name, real) ? real : name);
}

static int rtld(const dck_libfind_spec *s) { return RTLD_NOW | (s->global ? RTLD_GLOBAL : RTLD_LOCAL); }

/* The spec's libraries in folder dir (step: the line's label): each
 * present soname by its full path, the companion first. 1 when one
 * loaded. */
static int try_dir(const dck_libfind_spec *s, dck_libfind *f, const char *step, const char *dir) {
    if (!is_dir(dir)) {
        note(f, "%s: no folder %s", step, dir);
        return 0;
    }
    char path[PATH_MAX], absent[256] = "";
    for (size_t i = 0; i < 3 && s->sonames[i]; i++) {
        if (snprintf(path, sizeof path, "%s/%s", dir, s->sonames[i]) >= (int)sizeof path) continue;
        if (access(path, F_OK) != 0) {
            size_t n = strlen(absent);
            snprintf(absent + n, sizeof absent - n, "%s%s", n ? ", " : "", s->sonames[i]);
            continue;
        }
        void *comp = NULL;
        char cpath[PATH_MAX];
        if (s->companion && snprintf(cpath, sizeof cpath, "%s/%s", dir, s->companion) < (int)sizeof cpath &&
            access(cpath, F_OK) == 0 && !(comp = dlopen(cpath, rtld(s))))
            note(f, "%s: %s", step, dlerror());
        void *h = dlopen(path, rtld(s));
        if (h) {
            f->companion = comp;
            record(f, h, step, path);
            return 1;
        }
        note(f, "%s: %s", step, dlerror());
        if (comp) dlclose(comp);
    }
    if (*absent) note(f, "%s: %s has no %s", step, dir, absent);
    return 0;
}

/* ------------------------------------------------------------------ site-packages */

enum { MAX_SITES = 32 };
typedef struct {
    char *dir[MAX_SITES];
    size_t n;
    size_t dropped; /* beyond MAX_SITES (or out of memory): said in the places tried */
} sites;

static void site_add(sites *s, const char *dir) {
    char real[PATH_MAX];
    if (!is_dir(dir) || !realpath(dir, real)) return;
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->dir[i], real)) return;
    if (s->n < MAX_SITES && (s->dir[s->n] = dck_strdup(real))) s->n++;
    else s->dropped++;
}

/* The folders above file named site-packages or dist-packages, nearest first. */
static void site_add_above(sites *s, const char *file) {
    char real[PATH_MAX];
    if (!file || !*file || !realpath(file, real)) return;
    for (char *slash; (slash = strrchr(real, '/')) && slash != real;) {
        *slash = '\0';
        const char *base = strrchr(real, '/') + 1;
        if (!strcmp(base, "site-packages") || !strcmp(base, "dist-packages")) site_add(s, real);
    }
}

/* PREFIX's site-packages of every python3 (lib, lib64; dist-packages: Debian's). */
static void site_add_prefix(sites *s, const char *prefix) {
    static const char *const under[] = {"lib/python3*/site-packages", "lib64/python3*/site-packages",
                                        "lib/python3*/dist-packages"};
    char pattern[PATH_MAX];
    if (!prefix || !*prefix) return;
    for (size_t i = 0; i < sizeof under / sizeof under[0]; i++) {
        glob_t g;
        if (snprintf(pattern, sizeof pattern, "%s/%s", prefix, under[i]) >= (int)sizeof pattern) continue;
        if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0)
            for (size_t k = 0; k < g.gl_pathc; k++) site_add(s, g.gl_pathv[k]);
        globfree(&g);
    }
}

static void sites_find(sites *s, dck_libfind *f) {
    const char *list = getenv("DETCHECK_SITE_PACKAGES");
    if (list) { /* the user's own list: a name that is no folder is said */
        char *copy = dck_strdup(list), *save = NULL;
        for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d; d = strtok_r(NULL, ":", &save)) {
            if (!is_dir(d)) note(f, "NVIDIA wheel: DETCHECK_SITE_PACKAGES names %s: no such folder", d);
            site_add(s, d);
        }
        free(copy);
    }
    Dl_info di;
    if (dladdr((void *)(uintptr_t)dck_libfind_load, &di) && di.dli_fname) site_add_above(s, di.dli_fname);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        site_add_above(s, exe);
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        if ((slash = strrchr(exe, '/'))) { /* the executable's ../ */
            *slash = '\0';
            site_add_prefix(s, *exe ? exe : "/");
        }
    }
    site_add_prefix(s, getenv("VIRTUAL_ENV"));
    site_add_prefix(s, getenv("CONDA_PREFIX"));
    const char *user = getenv("PYTHONUSERBASE"), *home = getenv("HOME");
    char local[PATH_MAX];
    if ((!user || !*user) && home && *home && snprintf(local, sizeof local, "%s/.local", home) < (int)sizeof local)
        user = local;
    site_add_prefix(s, user);
}

static int try_wheels(const dck_libfind_spec *s, dck_libfind *f) {
    if (!s->wheel_dirs[0]) return 0;
    sites st = {{0}, 0, 0};
    sites_find(&st, f);
    int found = 0;
    char dir[PATH_MAX];
    for (size_t i = 0; i < st.n && !found; i++) {
        int any = 0;
        for (size_t k = 0; k < 3 && s->wheel_dirs[k] && !found; k++) {
            if (snprintf(dir, sizeof dir, "%s/%s", st.dir[i], s->wheel_dirs[k]) >= (int)sizeof dir || !is_dir(dir))
                continue;
            any = 1;
            found = try_dir(s, f, "NVIDIA wheel", dir);
        }
        if (!any) {
            char subs[256] = "";
            for (size_t k = 0; k < 3 && s->wheel_dirs[k]; k++) {
                size_t n = strlen(subs);
                snprintf(subs + n, sizeof subs - n, "%s%s", k ? ", " : "", s->wheel_dirs[k]);
            }
            note(f, "NVIDIA wheel: %s has no %s", st.dir[i], subs);
        }
    }
    if (st.dropped)
        note(f, "NVIDIA wheel: %zu more site-packages folders not searched (the first %d were)", st.dropped,
             MAX_SITES);
    if (!st.n)
        note(f, "NVIDIA wheel: no site-packages folder found (DETCHECK_SITE_PACKAGES, VIRTUAL_ENV, CONDA_PREFIX, "
                "the executable's ../lib/python3.N, ~/.local)");
    for (size_t i = 0; i < st.n; i++) free(st.dir[i]);
    return found;
}

/* ------------------------------------------------------------------ the search */

/* The places after the wheels that are folders named by a variable, and
 * the loader's own path, in order (libfind.h). */
static const struct {
    const char *step;
    const char *var;  /* NULL: the system's loader path */
    const char *sub;
    int cuda_only;
} places[] = {
    {"$CONDA_PREFIX/lib", "CONDA_PREFIX", "lib", 0},
    {"system loader path", NULL, NULL, 0},
    {"$CUDA_HOME", "CUDA_HOME", "lib64", 1},
    {"$CUDA_HOME", "CUDA_HOME", "lib", 1},
    {"$CUDA_PATH", "CUDA_PATH", "lib64", 1},
    {"$CUDA_PATH", "CUDA_PATH", "lib", 1},
};

static int try_override(const dck_libfind_spec *s, dck_libfind *f, const char *over) {
    const char *slash = strrchr(over, '/');
    char cpath[PATH_MAX];
    void *comp = NULL;
    if (s->companion && slash &&
        snprintf(cpath, sizeof cpath, "%.*s/%s", (int)(slash - over), over, s->companion) < (int)sizeof cpath &&
        access(cpath, F_OK) == 0)
        comp = dlopen(cpath, rtld(s));
    void *h = dlopen(over, rtld(s));
    if (!h) {
        note(f, "%s: %s", s->env, dlerror());
        if (comp) dlclose(comp);
        return 0;
    }
    f->companion = comp;
    record(f, h, s->env, over);
    return 1;
}

static int try_loaded(const dck_libfind_spec *s, dck_libfind *f) {
    for (size_t i = 0; i < 3 && s->sonames[i]; i++) {
        void *h = dlopen(s->sonames[i], rtld(s) | RTLD_NOLOAD);
        if (h) {
            record(f, h, "already loaded", s->sonames[i]);
            return 1;
        }
    }
    (void)dlerror();
    note(f, "already loaded: not in this process");
    return 0;
}

static int try_place(const dck_libfind_spec *s, dck_libfind *f, size_t p) {
    if (!places[p].var) {
        for (size_t i = 0; i < 3 && s->sonames[i]; i++) {
            void *h = dlopen(s->sonames[i], rtld(s));
            if (h) {
                record(f, h, places[p].step, s->sonames[i]);
                return 1;
            }
            note(f, "%s: %s", places[p].step, dlerror());
        }
        return 0;
    }
    const char *v = getenv(places[p].var);
    if (!v || !*v) { /* said once per variable */
        if (p == 0 || !places[p - 1].var || strcmp(places[p - 1].var, places[p].var))
            note(f, "%s: %s not set", places[p].step, places[p].var);
        return 0;
    }
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/%s", v, places[p].sub) >= (int)sizeof dir) {
        note(f, "%s: path too long", places[p].step);
        return 0;
    }
    return try_dir(s, f, places[p].step, dir);
}

int dck_libfind_load(const dck_libfind_spec *spec, dck_libfind *out) {
    memset(out, 0, sizeof *out);
    const char *over = spec->env ? getenv(spec->env) : NULL;
    if (over && *over) return try_override(spec, out, over);
    if (try_loaded(spec, out) || try_wheels(spec, out)) return 1;
    for (size_t p = 0; p < sizeof places / sizeof places[0]; p++)
        if ((!places[p].cuda_only || spec->cuda) && try_place(spec, out, p)) return 1;
    return 0;
}

void dck_libfind_close(dck_libfind *f) {
    if (f->handle) dlclose(f->handle);
    if (f->companion) dlclose(f->companion);
    f->handle = f->companion = NULL;
}

void dck_libfind_why(const dck_libfind_spec *spec, const dck_libfind *f, const char *what, char *buf, size_t n) {
    const char *over = spec->env ? getenv(spec->env) : NULL;
    size_t k = 0;
    buf[0] = '\0';
#define DCK_ADD_(...)                                                                            \
    do {                                                                                         \
        int w_ = k < n ? snprintf(buf + k, n - k, __VA_ARGS__) : 0;                              \
        k += w_ > 0 ? (size_t)w_ : 0;                                                            \
    } while (0)
    DCK_ADD_("cannot load %s (", what);
    if (over && *over) DCK_ADD_("%s", over);
    for (size_t i = 0; !(over && *over) && i < 3 && spec->sonames[i]; i++)
        DCK_ADD_("%s%s", i ? ", " : "", spec->sonames[i]);
    DCK_ADD_("): ");
    /* the places tried, one line each, joined by "; " */
    for (const char *p = f->tried; *p; p++) {
        if (*p != '\n') DCK_ADD_("%c", *p);
        else if (p[1]) DCK_ADD_("; ");
    }
#undef DCK_ADD_
}

void dck_libfind_lacks(const dck_libfind *f, const char *what, const char *fn, const char *how, char *buf,
                       size_t n) {
    int w = snprintf(buf, n, "%s has no %s: %s (%s, found by %s)", what, fn, how, f->path, f->from);
    (void)w; /* a long path is cut; the message leads with what matters */
}

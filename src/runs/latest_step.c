/* The step a checkpoint's name says (detcheck-latest(1), LAYOUTS): one
 * table of the layouts trainers name their checkpoints by, read exactly
 * (all digits, no sign, no wrap past 2^63 - 1, nothing after them but a
 * checkpoint file's extension). Apart from the scan of latest.c, which
 * uses the seals, so that the seals' own check can use it too. */
#include "runs/latest.h"

#include <limits.h>
#include <string.h>

/* The extensions of a checkpoint file: step_100.pt is step 100, while
 * step_100.tmp (a save under way) and step_100.log name no step. */
static const char *const ckpt_exts[] = {".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".npz"};

/* One row per layout (detcheck-latest(1), LAYOUTS). With ext NULL the name
 * is prefix, the step's digits, then nothing or one of ckpt_exts; with ext
 * (Lightning's filename templates) the name ends in ext and exactly one of
 * the '-'-separated parts before it is prefix and digits. */
static const struct {
    const char *prefix, *ext;
} layouts[] = {
    {"step_", NULL},       /* detcheck's own step_NNNNNNNN, and many scripts' step_N */
    {"step-", NULL},       /* torchtitan */
    {"iter_", NULL},       /* Megatron-LM: iter_NNNNNNN */
    {"global_step", NULL}, /* DeepSpeed */
    {"checkpoint-", NULL}, /* Hugging Face Trainer */
    {"step=", ".ckpt"},    /* PyTorch Lightning: step=N.ckpt, epoch=E-step=N.ckpt */
};

int dck_latest_digits(const char *s, size_t n, long long *v) {
    if (!n) return 0;
    unsigned long long x = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)((unsigned char)s[i] - '0');
        if (d > 9 || x > (unsigned long long)(LLONG_MAX - d) / 10) return 0;
        x = x * 10 + d;
    }
    *v = (long long)x;
    return 1;
}

static int is_ckpt_ext(const char *s) {
    if (!*s) return 1;
    for (size_t i = 0; i < sizeof ckpt_exts / sizeof ckpt_exts[0]; i++)
        if (!strcmp(s, ckpt_exts[i])) return 1;
    return 0;
}

/* The step of one '-'-separated part of name[0..n) that is prefix and
 * digits; 0 when none is, or two are (no guess between them), or one
 * starts with prefix and goes on with something else (step=12abc). */
static int component_step(const char *name, size_t n, const char *prefix, long long *step) {
    size_t lp = strlen(prefix);
    int found = 0;
    for (size_t at = 0; at <= n;) {
        size_t len = 0;
        while (at + len < n && name[at + len] != '-') len++;
        if (len >= lp && !memcmp(name + at, prefix, lp)) {
            if (found || !dck_latest_digits(name + at + lp, len - lp, step)) return 0;
            found = 1;
        }
        at += len + 1;
    }
    return found;
}

int dck_latest_step(const char *name, long long *step) {
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        const char *prefix = layouts[i].prefix, *ext = layouts[i].ext;
        size_t lp = strlen(prefix);
        if (ext) {
            size_t le = strlen(ext);
            if (n > le && !strcmp(name + n - le, ext) && component_step(name, n - le, prefix, step)) return 1;
            continue;
        }
        if (strncmp(name, prefix, lp)) continue;
        size_t nd = strspn(name + lp, "0123456789");
        if (is_ckpt_ext(name + lp + nd) && dck_latest_digits(name + lp, nd, step)) return 1;
    }
    return 0;
}

/* Options of the training loop: one table drives parsing (CLI and
 * resume-check pass-through), the canonical config stored in checkpoints,
 * the config check on resume and the replay command printed by bisect. */
#include "train/train.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void dck_train_config_init(dck_train_config *c) {
    memset(c, 0, sizeof *c);
    c->vocab = 256;
    c->layers = 2;
    c->width = 64;
    c->heads = 4;
    c->seq = 32;
    c->batch = 1;
    c->microbatches = 8;
    c->seed = 1;
    c->lr = 3e-3f;
    c->min_lr = 3e-4f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->clip = 1.0f;
    c->warmup = 10;
    c->decay_steps = 0;
    c->precision = DCK_PREC_FP32;
    c->steps = 20;
    c->mode = DCK_MODE_DET;
    c->threads = 1;
    c->digest_every = 1;
    c->flip_step = -1;
    c->kill_after_ckpt = -1;
    c->kill_during_ckpt = -1;
}

typedef enum { O_INT, O_LONG, O_U64, O_FLOAT, O_STR, O_SWITCH, O_SPECIAL } opt_kind;

typedef struct {
    const char *name;
    opt_kind kind;
    size_t off;
    double min, max;
    bool identity; /* part of the stored config */
} opt;

#define F(field) offsetof(dck_train_config, field)
static const opt opts[] = {
    {"vocab", O_INT, F(vocab), 2, 65536, true},
    {"layers", O_INT, F(layers), 1, 64, true},
    {"width", O_INT, F(width), 1, 8192, true},
    {"heads", O_INT, F(heads), 1, 256, true},
    {"seq", O_INT, F(seq), 1, 8192, true},
    {"batch", O_INT, F(batch), 1, 1 << 20, true},
    {"microbatches", O_INT, F(microbatches), 1, 1 << 16, true},
    {"seed", O_U64, F(seed), 0, 0, true},
    {"data", O_STR, F(data), 0, 0, true},
    {"lr", O_FLOAT, F(lr), 0, 10, true},
    {"min-lr", O_FLOAT, F(min_lr), 0, 10, true},
    {"beta1", O_FLOAT, F(beta1), 0, 0.999999, true},
    {"beta2", O_FLOAT, F(beta2), 0, 0.999999, true},
    {"eps", O_FLOAT, F(eps), 0, 1, true},
    {"weight-decay", O_FLOAT, F(weight_decay), 0, 10, true},
    {"clip", O_FLOAT, F(clip), 0, 1e30, true},
    {"warmup", O_LONG, F(warmup), 0, 1e12, true},
    {"decay-steps", O_SPECIAL, F(decay_steps), 0, 1e12, true},
    {"precision", O_SPECIAL, F(precision), 0, 0, true},
    {"steps", O_LONG, F(steps), 0, 1e12, false},
    {"mode", O_SPECIAL, F(mode), 0, 0, false},
    {"threads", O_INT, F(threads), 1, 256, false},
    {"out", O_STR, F(out), 0, 0, false},
    {"resume", O_SWITCH, F(resume), 0, 0, false},
    {"resume-from", O_STR, F(resume_from), 0, 0, false},
    {"ckpt-every", O_LONG, F(ckpt_every), 0, 1e12, false},
    {"digest-every", O_LONG, F(digest_every), 0, 1e12, false},
    {"compress", O_SPECIAL, F(compress), 0, 0, false},
    {"flip-bit", O_SPECIAL, F(flip_step), 0, 0, false},
    {"kill-after-ckpt", O_LONG, F(kill_after_ckpt), 1, 1e12, false},
    {"kill-during-ckpt", O_LONG, F(kill_during_ckpt), 1, 1e12, false},
};
#undef F

static const opt *find_opt(const char *name) {
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (!strcmp(opts[i].name, name)) return &opts[i];
    return NULL;
}

int dck_train_flag_takes_value(const char *name) {
    const opt *o = find_opt(name);
    if (!o) return -1;
    if (o->kind == O_SWITCH) return 0;
    if (!strcmp(name, "compress")) return 0;
    return 1;
}

static dck_status bad(const char *name, const char *value, const char *why) {
    return dck_set_error(DCK_ERR_INVALID, "--%s '%s': %s", name, value ? value : "", why);
}

dck_status dck_train_config_set(dck_train_config *c, const char *name, const char *value) {
    const opt *o = find_opt(name);
    if (!o) return dck_set_error(DCK_ERR_INVALID, "unknown option --%s", name);
    char *field = (char *)c + o->off;
    if (o->kind == O_SWITCH) {
        *(bool *)field = true;
        return DCK_OK;
    }
    if (!strcmp(name, "compress")) {
        c->compress = 3;
        return DCK_OK;
    }
    if (!value) return bad(name, value, "needs a value");
    char *end;
    errno = 0;
    switch (o->kind) {
    case O_INT:
    case O_LONG: {
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end || v < (long long)o->min || v > (long long)o->max) {
            char why[96];
            snprintf(why, sizeof why, "not an integer in [%.0f, %.0f]", o->min, o->max);
            return bad(name, value, why);
        }
        if (o->kind == O_INT)
            *(int *)field = (int)v;
        else
            *(long *)field = (long)v;
        return DCK_OK;
    }
    case O_U64: {
        if (value[0] == '-') return bad(name, value, "not an unsigned integer");
        unsigned long long v = strtoull(value, &end, 0);
        if (errno || end == value || *end) return bad(name, value, "not an unsigned integer");
        *(uint64_t *)field = (uint64_t)v;
        return DCK_OK;
    }
    case O_FLOAT: {
        float v = strtof(value, &end);
        if (errno || end == value || *end || !(v >= (float)o->min) || !(v <= (float)o->max)) {
            char why[96];
            snprintf(why, sizeof why, "not a number in [%g, %g]", o->min, o->max);
            return bad(name, value, why);
        }
        *(float *)field = v;
        return DCK_OK;
    }
    case O_STR:
        if (strlen(value) >= DCK_TRAIN_PATH) return bad(name, value, "too long");
        snprintf(field, DCK_TRAIN_PATH, "%s", value);
        return DCK_OK;
    default:
        break;
    }
    if (!strcmp(name, "precision")) {
        if (!strcmp(value, "fp32"))
            c->precision = DCK_PREC_FP32;
        else if (!strcmp(value, "bf16"))
            c->precision = DCK_PREC_BF16;
        else
            return bad(name, value, "use fp32 or bf16");
        return DCK_OK;
    }
    if (!strcmp(name, "mode")) {
        if (!strcmp(value, "det") || !strcmp(value, "deterministic"))
            c->mode = DCK_MODE_DET;
        else if (!strcmp(value, "fast"))
            c->mode = DCK_MODE_FAST;
        else
            return bad(name, value, "use deterministic or fast");
        return DCK_OK;
    }
    if (!strcmp(name, "decay-steps")) {
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end || v < 1 || v > 1000000000000LL)
            return bad(name, value, "not a positive integer");
        c->decay_steps = (long)v;
        c->decay_set = true;
        return DCK_OK;
    }
    if (!strcmp(name, "flip-bit")) {
        /* STEP:TENSOR:INDEX */
        const char *a = strchr(value, ':');
        const char *b = a ? strrchr(value, ':') : NULL;
        if (!a || b == a) return bad(name, value, "use STEP:TENSOR:INDEX");
        long long s = strtoll(value, &end, 10);
        if (end != a || s < 1) return bad(name, value, "STEP must be a positive integer");
        unsigned long long idx = strtoull(b + 1, &end, 10);
        if (*end || end == b + 1) return bad(name, value, "INDEX must be an integer");
        size_t tl = (size_t)(b - a - 1);
        if (tl == 0 || tl >= sizeof c->flip_tensor) return bad(name, value, "bad TENSOR");
        memcpy(c->flip_tensor, a + 1, tl);
        c->flip_tensor[tl] = 0;
        c->flip_step = (long)s;
        c->flip_index = idx;
        return DCK_OK;
    }
    return bad(name, value, "unsupported");
}

static bool pow2(long x) { return x > 0 && (x & (x - 1)) == 0; }

dck_status dck_train_config_check(const dck_train_config *c) {
    if (c->width % c->heads != 0)
        return dck_set_error(DCK_ERR_INVALID, "--width %d is not a multiple of --heads %d",
                             c->width, c->heads);
    if (!pow2(c->microbatches))
        return dck_set_error(DCK_ERR_INVALID, "--microbatches %d is not a power of two",
                             c->microbatches);
    if (c->min_lr > c->lr)
        return dck_set_error(DCK_ERR_INVALID, "--min-lr %g is above --lr %g", (double)c->min_lr,
                             (double)c->lr);
    if (c->resume && c->resume_from[0])
        return dck_set_error(DCK_ERR_INVALID, "--resume and --resume-from exclude each other");
    if ((c->resume || c->ckpt_every > 0 || c->kill_after_ckpt > 0 || c->kill_during_ckpt > 0) &&
        !c->out[0])
        return dck_set_error(DCK_ERR_INVALID,
                             "--resume, --ckpt-every and --kill-* need --out DIR");
    /* bound memory: parameters, activations */
    double d = c->width, P = (double)c->vocab * d * 2 + (double)c->seq * d +
                                 (double)c->layers * (12.0 * d * d + 13.0 * d);
    if (P > 2e8)
        return dck_set_error(DCK_ERR_LIMIT, "model of %.0f parameters is beyond this tool's 2e8 limit", P);
    double act = (double)c->layers * ((double)c->heads * c->seq * c->seq + 20.0 * c->seq * d) +
                 2.0 * c->seq * (double)c->vocab;
    if (act > 5e8)
        return dck_set_error(DCK_ERR_LIMIT, "activations of %.0f floats per sequence beyond the 5e8 limit", act);
    return DCK_OK;
}

/* xxh128 of the token file: the run's identity holds the data, not its path. */
static dck_status data_fingerprint(const char *path, char hex[33]) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dck_set_error(DCK_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return dck_set_error(DCK_ERR_IO, "%s: %s", path, strerror(errno));
    }
    dck_digest dg;
    if (st.st_size == 0) {
        dg = dck_xxh128("", 0);
    } else {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            return dck_set_error(DCK_ERR_IO, "%s: mmap: %s", path, strerror(errno));
        }
        dg = dck_xxh128(p, (size_t)st.st_size);
        munmap(p, (size_t)st.st_size);
    }
    close(fd);
    dck_digest_to_hex(dg, hex);
    return DCK_OK;
}

#define fstr dck_float_text

static json_t *config_object(const dck_train_config *c) {
    json_t *o = json_object();
    char buf[64];
    json_object_set_new(o, "format", json_string("detcheck-train-config-v1"));
#define I(k, v) json_object_set_new(o, k, json_integer((json_int_t)(v)))
#define FL(k, v) json_object_set_new(o, k, json_string(fstr(v, buf, sizeof buf)))
    I("vocab", c->vocab);
    I("layers", c->layers);
    I("width", c->width);
    I("heads", c->heads);
    I("seq", c->seq);
    I("batch", c->batch);
    I("microbatches", c->microbatches);
    snprintf(buf, sizeof buf, "%llu", (unsigned long long)c->seed);
    json_object_set_new(o, "seed", json_string(buf));
    FL("lr", c->lr);
    FL("min_lr", c->min_lr);
    FL("beta1", c->beta1);
    FL("beta2", c->beta2);
    FL("eps", c->eps);
    FL("weight_decay", c->weight_decay);
    FL("clip", c->clip);
    I("warmup", c->warmup);
    I("decay_steps", c->decay_steps > 0 ? c->decay_steps : c->steps);
    json_object_set_new(o, "precision", json_string(c->precision == DCK_PREC_BF16 ? "bf16" : "fp32"));
    if (c->data[0]) {
        char hex[33];
        if (data_fingerprint(c->data, hex) != DCK_OK) {
            json_decref(o);
            return NULL;
        }
        json_object_set_new(o, "data", json_string(hex));
        json_object_set_new(o, "data_path", json_string(c->data));
    } else {
        json_object_set_new(o, "data", json_string("synthetic-markov-v1"));
    }
#undef I
#undef FL
    return o;
}

char *dck_train_config_json(const dck_train_config *c) {
    json_t *o = config_object(c);
    if (!o) return NULL;
    char *s = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(o);
    if (!s) dck_oom("train");
    return s;
}

static void text_of(json_t *v, char *buf, size_t n) {
    if (!v)
        snprintf(buf, n, "(absent)");
    else if (json_is_string(v))
        snprintf(buf, n, "%s", json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf, n, "%lld", (long long)json_integer_value(v));
    else
        snprintf(buf, n, "?");
}

dck_status dck_train_config_match(const dck_train_config *c, const char *stored, const char *label) {
    json_error_t err;
    json_t *old = json_loads(stored, 0, &err);
    if (!old || !json_is_object(old)) {
        json_decref(old);
        return dck_set_error(DCK_ERR_FORMAT, "%s: stored training config is not JSON: %s", label,
                             err.text);
    }
    json_t *now = config_object(c);
    if (!now) {
        json_decref(old);
        return DCK_ERR_IO;
    }
    char msg[1536] = "";
    size_t len = 0;
    int n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(now, key, v) {
        if (!strcmp(key, "data_path")) continue;
        json_t *w = json_object_get(old, key);
        if (w && json_equal(v, w)) continue;
        char a[160], b[160];
        text_of(w, a, sizeof a);
        text_of(v, b, sizeof b);
        if (len < sizeof msg - 1)
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%s: checkpoint %s, this run %s",
                                    n ? "; " : "", key, a, b);
        n++;
    }
    json_decref(old);
    json_decref(now);
    if (n)
        return dck_set_error(DCK_ERR_MISMATCH,
                             "%s: the checkpoint was written by another configuration (%s)", label,
                             msg);
    return DCK_OK;
}

dck_status dck_train_config_from_json(dck_train_config *c, const char *json, const char *label) {
    json_error_t err;
    json_t *o = json_loads(json, 0, &err);
    if (!o || !json_is_object(o)) {
        json_decref(o);
        return dck_set_error(DCK_ERR_FORMAT, "%s: stored training config is not JSON: %s", label,
                             err.text);
    }
    dck_status st = DCK_OK;
    static const struct {
        const char *key, *flag;
    } map[] = {{"vocab", "vocab"},         {"layers", "layers"},     {"width", "width"},
               {"heads", "heads"},         {"seq", "seq"},           {"batch", "batch"},
               {"microbatches", "microbatches"}, {"seed", "seed"},   {"lr", "lr"},
               {"min_lr", "min-lr"},       {"beta1", "beta1"},       {"beta2", "beta2"},
               {"eps", "eps"},             {"weight_decay", "weight-decay"}, {"clip", "clip"},
               {"warmup", "warmup"},       {"decay_steps", "decay-steps"},
               {"precision", "precision"}, {"data_path", "data"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0] && st == DCK_OK; i++) {
        json_t *v = json_object_get(o, map[i].key);
        if (!v) continue;
        char buf[DCK_TRAIN_PATH];
        text_of(v, buf, sizeof buf);
        st = dck_train_config_set(c, map[i].flag, buf);
    }
    json_decref(o);
    if (st != DCK_OK) {
        char m[512];
        snprintf(m, sizeof m, "%s", dck_last_error());
        return dck_set_error(st, "%s: stored training config: %s", label, m);
    }
    return DCK_OK;
}

char *dck_train_config_flags(const dck_train_config *c) {
    char *buf = dck_xmalloc(4096 + DCK_TRAIN_PATH);
    if (!buf) return NULL;
    char f[7][32];
    size_t n = (size_t)snprintf(
        buf, 4096,
        "--vocab %d --layers %d --width %d --heads %d --seq %d --batch %d --microbatches %d "
        "--seed %llu --lr %s --min-lr %s --beta1 %s --beta2 %s --eps %s "
        "--weight-decay %s --clip %s --warmup %ld --decay-steps %ld --precision %s",
        c->vocab, c->layers, c->width, c->heads, c->seq, c->batch, c->microbatches,
        (unsigned long long)c->seed, fstr(c->lr, f[0], 32), fstr(c->min_lr, f[1], 32),
        fstr(c->beta1, f[2], 32), fstr(c->beta2, f[3], 32), fstr(c->eps, f[4], 32),
        fstr(c->weight_decay, f[5], 32), fstr(c->clip, f[6], 32), c->warmup,
        c->decay_steps > 0 ? c->decay_steps : c->steps,
        c->precision == DCK_PREC_BF16 ? "bf16" : "fp32");
    if (c->mode == DCK_MODE_FAST) n += (size_t)snprintf(buf + n, 4096 - n, " --mode fast");
    if (c->data[0]) snprintf(buf + n, DCK_TRAIN_PATH + 16, " --data '%s'", c->data);
    return buf;
}

/* Options of the training loop: one table drives parsing (train and
 * resume-check), the range check of any config, the canonical config stored
 * in checkpoints (and read back by bisect), the config check on resume, and
 * the flags that reproduce a config (the runs resume-check starts, the
 * replay command bisect prints), floats written so that they read back bit
 * for bit. */
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
    size_t off, size; /* the field (for O_SPECIAL, the one that says whether it is on) */
    double min, max;  /* numbers: the accepted range */
    dck_train_scope scope;
    bool optional;    /* off at its default: left out of the flags, not range-checked */
} opt;

/* The one list of the trainer's options: parsing (train, resume-check), the
 * range check, the stored config (the IDENTITY rows, under the name with '_'
 * for '-') and the flags that reproduce a config (replay commands, the runs
 * resume-check starts). Its order is the order of the flags. */
#define F(field) offsetof(dck_train_config, field), sizeof(((dck_train_config *)0)->field)
#define ID DCK_TRAIN_IDENTITY
static const opt opts[] = {
    /* first: a preset sets the shape, the flags after it change parts of it */
    {"preset", O_SPECIAL, F(preset), 0, 0, DCK_TRAIN_INSTANCE, true},
    {"vocab", O_INT, F(vocab), 2, 65536, ID, false},
    {"layers", O_INT, F(layers), 1, 64, ID, false},
    {"width", O_INT, F(width), 1, 8192, ID, false},
    {"heads", O_INT, F(heads), 1, 256, ID, false},
    {"seq", O_INT, F(seq), 1, 8192, ID, false},
    {"batch", O_INT, F(batch), 1, 1 << 20, ID, false},
    {"microbatches", O_INT, F(microbatches), 1, DCK_TRAIN_MAX_MICROBATCHES, ID, false},
    {"seed", O_U64, F(seed), 0, 0, ID, false},
    {"lr", O_FLOAT, F(lr), 0, 10, ID, false},
    {"min-lr", O_FLOAT, F(min_lr), 0, 10, ID, false},
    {"beta1", O_FLOAT, F(beta1), 0, 0.999999, ID, false},
    {"beta2", O_FLOAT, F(beta2), 0, 0.999999, ID, false},
    {"eps", O_FLOAT, F(eps), 0, 1, ID, false},
    {"weight-decay", O_FLOAT, F(weight_decay), 0, 10, ID, false},
    {"clip", O_FLOAT, F(clip), 0, 1e30, ID, false},
    {"warmup", O_LONG, F(warmup), 0, 1e12, ID, false},
    {"decay-steps", O_SPECIAL, F(decay_steps), 1, 1e12, ID, true},
    {"precision", O_SPECIAL, F(precision), 0, 0, ID, false},
    {"mode", O_SPECIAL, F(mode), 0, 0, DCK_TRAIN_NUMERICS, true},
    {"data", O_STR, F(data), 0, 0, ID, true},
    {"steps", O_LONG, F(steps), 0, 1e12, DCK_TRAIN_RUN, false},
    {"threads", O_INT, F(threads), 1, 256, DCK_TRAIN_RUN, false},
    {"digest-every", O_LONG, F(digest_every), 0, 1e12, DCK_TRAIN_RUN, false},
    {"compress", O_SPECIAL, F(compress), 0, 0, DCK_TRAIN_RUN, true},
    {"device", O_SPECIAL, F(device), 0, 0, DCK_TRAIN_RUN, true},
    {"out", O_STR, F(out), 0, 0, DCK_TRAIN_INSTANCE, true},
    {"resume", O_SWITCH, F(resume), 0, 0, DCK_TRAIN_INSTANCE, true},
    {"resume-from", O_STR, F(resume_from), 0, 0, DCK_TRAIN_INSTANCE, true},
    {"ckpt-every", O_LONG, F(ckpt_every), 0, 1e12, DCK_TRAIN_INSTANCE, true},
    {"flip-bit", O_SPECIAL, F(flip_step), 0, 0, DCK_TRAIN_INSTANCE, true},
    {"kill-after-ckpt", O_LONG, F(kill_after_ckpt), 1, 1e12, DCK_TRAIN_INSTANCE, true},
    {"kill-during-ckpt", O_LONG, F(kill_during_ckpt), 1, 1e12, DCK_TRAIN_INSTANCE, true},
};
#undef ID
#undef F
#define NOPTS (sizeof opts / sizeof opts[0])

static const opt *find_opt(const char *name) {
    for (size_t i = 0; i < NOPTS; i++)
        if (!strcmp(opts[i].name, name)) return &opts[i];
    return NULL;
}

const char *dck_train_option_name(size_t i) { return i < NOPTS ? opts[i].name : NULL; }

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

static dck_status not_in_range(const opt *o, const char *value) {
    char why[96];
    if (o->kind == O_FLOAT)
        snprintf(why, sizeof why, "not a number in [%g, %g]", o->min, o->max);
    else
        snprintf(why, sizeof why, "not an integer in [%.0f, %.0f]", o->min, o->max);
    return bad(o->name, value, why);
}

/* --preset: model shapes (documented with their memory in detcheck-train(1));
 * tiny is the default shape; small is GPT-2 small's (124M parameters with
 * its tied head, 163M here with an untied one); medium GPT-2 medium's with a
 * 512-token context (within the parameter and activation limits below). */
typedef struct {
    const char *name;
    int vocab, layers, width, heads, seq;
} preset;
static const preset presets[] = {
    {"tiny", 256, 2, 64, 4, 32},
    {"small", 50257, 12, 768, 12, 1024},
    {"medium", 50257, 24, 1024, 16, 512},
};

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
        if (errno || end == value || *end || v < (long long)o->min || v > (long long)o->max)
            return not_in_range(o, value);
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
        if (errno || end == value || *end || !(v >= (float)o->min) || !(v <= (float)o->max))
            return not_in_range(o, value);
        *(float *)field = v;
        return DCK_OK;
    }
    case O_STR:
        if (strlen(value) >= o->size) return bad(name, value, "too long");
        snprintf(field, o->size, "%s", value);
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
    if (!strcmp(name, "device")) {
        static const char *const devices[] = {"cpu", "cuda", "auto", "twin"};
        for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++)
            if (!strcmp(value, devices[i])) {
                snprintf(c->device, sizeof c->device, "%s", value);
                return DCK_OK;
            }
        /* the list comes from the table, so it names every device accepted */
        char list[64] = "use";
        size_t nd = sizeof devices / sizeof devices[0];
        for (size_t i = 0; i < nd; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s %s",
                     i == 0 ? "" : i + 1 < nd ? "," : " or", devices[i]);
        return bad(name, value, list);
    }
    if (!strcmp(name, "preset")) {
        for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
            const preset *p = &presets[i];
            if (strcmp(value, p->name)) continue;
            c->vocab = p->vocab;
            c->layers = p->layers;
            c->width = p->width;
            c->heads = p->heads;
            c->seq = p->seq;
            snprintf(c->preset, sizeof c->preset, "%s", value);
            return DCK_OK;
        }
        return bad(name, value, "use tiny, small or medium");
    }
    if (!strcmp(name, "decay-steps")) {
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end || v < (long long)o->min || v > (long long)o->max)
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

/* Whether option o of c is off: at its default, for the options that may be. */
static bool is_off(const opt *o, const dck_train_config *c) {
    if (!o->optional) return false;
    if (o->kind == O_STR) return ((const char *)c + o->off)[0] == 0;
    dck_train_config d;
    dck_train_config_init(&d);
    return memcmp((const char *)c + o->off, (const char *)&d + o->off, o->size) == 0;
}

/* Option o of c as flag text: 1 with the value in buf, 0 for a switch that
 * is on, -1 when the option is off (left out). buf holds DCK_TRAIN_PATH +
 * 64 bytes. */
enum { FLAG_BUF = DCK_TRAIN_PATH + 64 };
static int flag_text(const opt *o, const dck_train_config *c, char *buf) {
    if (is_off(o, c)) return -1;
    const char *field = (const char *)c + o->off;
    switch (o->kind) {
    case O_INT: snprintf(buf, FLAG_BUF, "%d", *(const int *)field); return 1;
    case O_LONG: snprintf(buf, FLAG_BUF, "%ld", *(const long *)field); return 1;
    case O_U64: snprintf(buf, FLAG_BUF, "%llu", (unsigned long long)*(const uint64_t *)field); return 1;
    case O_FLOAT: dck_float_text(*(const float *)field, buf, FLAG_BUF); return 1;
    case O_STR: snprintf(buf, FLAG_BUF, "%s", field); return 1;
    case O_SWITCH: return *(const bool *)field ? 0 : -1;
    default: break;
    }
    if (!strcmp(o->name, "decay-steps")) snprintf(buf, FLAG_BUF, "%ld", c->decay_steps);
    else if (!strcmp(o->name, "precision")) snprintf(buf, FLAG_BUF, "%s", c->precision == DCK_PREC_BF16 ? "bf16" : "fp32");
    else if (!strcmp(o->name, "mode")) snprintf(buf, FLAG_BUF, "%s", c->mode == DCK_MODE_FAST ? "fast" : "deterministic");
    else if (!strcmp(o->name, "compress")) return 0;
    else if (!strcmp(o->name, "device")) snprintf(buf, FLAG_BUF, "%s", c->device);
    /* first in the table: the identity flags after it give the same shape */
    else if (!strcmp(o->name, "preset")) snprintf(buf, FLAG_BUF, "%s", c->preset);
    else if (!strcmp(o->name, "flip-bit"))
        snprintf(buf, FLAG_BUF, "%ld:%s:%llu", c->flip_step, c->flip_tensor, (unsigned long long)c->flip_index);
    else return -1;
    return 1;
}

dck_status dck_train_config_to_flags(const dck_train_config *c, dck_train_scope upto,
                                     dck_train_flag **flags, size_t *n) {
    *flags = NULL;
    *n = 0;
    char buf[FLAG_BUF];
    size_t count = 0, text = 0;
    for (size_t i = 0; i < NOPTS; i++) {
        if (opts[i].scope > upto) continue;
        int k = flag_text(&opts[i], c, buf);
        if (k < 0) continue;
        count++;
        if (k) text += strlen(buf) + 1;
    }
    /* one block: the flags, then their values */
    dck_train_flag *f = dck_xmalloc(count * sizeof *f + text);
    if (!f) return dck_oom("train");
    char *p = (char *)(f + count);
    size_t j = 0;
    for (size_t i = 0; i < NOPTS; i++) {
        if (opts[i].scope > upto) continue;
        int k = flag_text(&opts[i], c, buf);
        if (k < 0) continue;
        f[j].name = opts[i].name;
        f[j].value = NULL;
        if (k) {
            size_t len = strlen(buf) + 1;
            memcpy(p, buf, len);
            f[j].value = p;
            p += len;
        }
        j++;
    }
    *flags = f;
    *n = count;
    return DCK_OK;
}

char *dck_train_config_flags(const dck_train_config *c, dck_train_scope upto) {
    dck_train_flag *f;
    size_t n;
    if (dck_train_config_to_flags(c, upto, &f, &n)) return NULL;
    size_t cap = 1;
    for (size_t i = 0; i < n; i++) {
        cap += strlen(f[i].name) + 4;
        if (f[i].value) cap += 4 * strlen(f[i].value) + 3;
    }
    char *out = dck_xmalloc(cap);
    if (!out) {
        free(f);
        dck_oom("train");
        return NULL;
    }
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(out + len, cap - len, "%s--%s", i ? " " : "", f[i].name);
        if (!f[i].value) continue;
        const opt *o = find_opt(f[i].name);
        if (o->kind != O_STR) {
            len += (size_t)snprintf(out + len, cap - len, " %s", f[i].value);
            continue;
        }
        /* a path, for the shell: in single quotes, a quote as '\'' */
        out[len++] = ' ';
        out[len++] = '\'';
        for (const char *v = f[i].value; *v; v++) {
            if (*v == '\'') {
                memcpy(out + len, "'\\''", 4);
                len += 4;
            } else {
                out[len++] = *v;
            }
        }
        out[len++] = '\'';
    }
    out[len] = 0;
    free(f);
    return out;
}

static bool pow2(long x) { return x > 0 && (x & (x - 1)) == 0; }

/* Whether option o of c lies in the table's range (as dck_train_config_set
 * compares: floats as floats); options that are off and options without a
 * range always do. */
static bool in_range(const opt *o, const dck_train_config *c) {
    const char *field = (const char *)c + o->off;
    if (is_off(o, c)) return true;
    switch (o->kind) {
    case O_INT: return *(const int *)field >= (long long)o->min && *(const int *)field <= (long long)o->max;
    case O_LONG: return *(const long *)field >= (long long)o->min && *(const long *)field <= (long long)o->max;
    case O_FLOAT: {
        float v = *(const float *)field;
        return v >= (float)o->min && v <= (float)o->max;
    }
    default: break;
    }
    if (!strcmp(o->name, "decay-steps"))
        return c->decay_steps >= (long long)o->min && c->decay_steps <= (long long)o->max;
    return true;
}

dck_status dck_train_config_check(const dck_train_config *c) {
    /* the parser's ranges hold however the config was made */
    for (size_t i = 0; i < NOPTS; i++) {
        if (in_range(&opts[i], c)) continue;
        char text[FLAG_BUF];
        flag_text(&opts[i], c, text);
        if (!strcmp(opts[i].name, "decay-steps")) return bad(opts[i].name, text, "not a positive integer");
        return not_in_range(&opts[i], text);
    }
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
    if (P > 5e8)
        return dck_set_error(DCK_ERR_LIMIT, "model of %.0f parameters is beyond this tool's 5e8 limit", P);
    double act = (double)c->layers * ((double)c->heads * c->seq * c->seq + 20.0 * c->seq * d) +
                 2.0 * c->seq * (double)c->vocab;
    if (act > 5e8)
        return dck_set_error(DCK_ERR_LIMIT, "activations of %.0f floats per sequence beyond the 5e8 limit", act);
    return DCK_OK;
}

dck_status dck_train_config_ranks(const dck_train_config *c, int ranks) {
    if (ranks > DCK_TRAIN_MAX_RANKS)
        return dck_set_error(DCK_ERR_LIMIT, "%d ranks are beyond this tool's limit of %d ranks per run",
                             ranks, DCK_TRAIN_MAX_RANKS);
    if (ranks < 1 || c->microbatches % ranks != 0)
        return dck_set_error(DCK_ERR_INVALID,
                             "%d ranks do not divide --microbatches %d: use a K that divides M "
                             "(both powers of two)",
                             ranks, c->microbatches);
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

/* The stored config: the IDENTITY options of the table under their names
 * with '_' for '-', integers as JSON integers and everything else as the
 * flag's text; decay_steps resolved; the token file by its content hash
 * (and its path, not compared). Keys sorted when written. */
static void json_key(const char *name, char *key, size_t n) {
    snprintf(key, n, "%s", name);
    for (char *p = key; *p; p++)
        if (*p == '-') *p = '_';
}

static dck_status config_object(const dck_train_config *c, json_t **out) {
    *out = NULL;
    dck_train_config r = *c;
    if (r.decay_steps <= 0) r.decay_steps = r.steps;
    json_t *o = json_object();
    int err = !o || json_object_set_new(o, "format", json_string("detcheck-train-config-v1"));
    for (size_t i = 0; i < NOPTS && !err; i++) {
        const opt *op = &opts[i];
        if (op->scope != DCK_TRAIN_IDENTITY || op->kind == O_STR) continue;
        char key[64], text[FLAG_BUF];
        json_key(op->name, key, sizeof key);
        json_t *v;
        if (op->kind == O_INT)
            v = json_integer(*(const int *)((const char *)&r + op->off));
        else if (op->kind == O_LONG || !strcmp(op->name, "decay-steps"))
            v = json_integer(*(const long *)((const char *)&r + op->off));
        else
            v = flag_text(op, &r, text) > 0 ? json_string(text) : NULL;
        err = json_object_set_new(o, key, v);
    }
    if (!err && c->data[0]) {
        char hex[33];
        dck_status s = data_fingerprint(c->data, hex);
        if (s) {
            json_decref(o);
            return s;
        }
        err = json_object_set_new(o, "data", json_string(hex)) ||
              json_object_set_new(o, "data_path", json_string(c->data));
    } else if (!err) {
        err = json_object_set_new(o, "data", json_string("synthetic-markov-v1"));
    }
    if (err) {
        json_decref(o);
        return dck_oom("train");
    }
    *out = o;
    return DCK_OK;
}

dck_status dck_train_config_json(const dck_train_config *c, char **json) {
    json_t *o;
    *json = NULL;
    DCK_TRY(config_object(c, &o));
    *json = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(o);
    return *json ? DCK_OK : dck_oom("train");
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
    json_t *now;
    dck_status s = config_object(c, &now);
    if (s) {
        json_decref(old);
        return s;
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
    /* the IDENTITY options under their stored names; the token file by its
     * path (its content is compared by dck_train_config_match) */
    for (size_t i = 0; i < NOPTS && st == DCK_OK; i++) {
        if (opts[i].scope != DCK_TRAIN_IDENTITY) continue;
        char key[64];
        json_key(opts[i].kind == O_STR ? "data_path" : opts[i].name, key, sizeof key);
        json_t *v = json_object_get(o, key);
        if (!v) continue;
        char buf[DCK_TRAIN_PATH];
        text_of(v, buf, sizeof buf);
        st = dck_train_config_set(c, opts[i].name, buf);
    }
    json_decref(o);
    if (st != DCK_OK) {
        char m[512];
        snprintf(m, sizeof m, "%s", dck_last_error());
        return dck_set_error(st, "%s: stored training config: %s", label, m);
    }
    return DCK_OK;
}

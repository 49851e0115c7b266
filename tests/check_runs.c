/* Recorded runs as files (src/runs/): the framing tensor_digests.bin and
 * trace.bin share, checked on both formats through one table (the torn
 * last record, the header, NAME records, messages naming the file and the
 * byte offset), and trajectory.jsonl's reader and writer. */
#include "testutil.h"
#include "runs/recording.h"
#include "runs/compare.h"
#include "runs/trace.h"
#include "runs/trajectory.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

/* ------------------------------------------------------------------ building files */

typedef struct {
    uint8_t b[4096];
    size_t n;
} buf;

static void put(buf *b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) b->b[b->n++] = (uint8_t)(v >> (8 * i));
}

static void put_bytes(buf *b, const void *p, size_t n) {
    memcpy(b->b + b->n, p, n);
    b->n += n;
}

static void rec_header(buf *b, uint32_t version, uint32_t flags) {
    put_bytes(b, "DCKTDIG", 8);
    put(b, version, 4);
    put(b, flags, 4);
}

static void rec_name(buf *b, uint32_t id, const char *name, size_t len) {
    put(b, 1, 1);
    put(b, id, 4);
    put(b, DCK_REC_PARAMETER, 1);
    put(b, len, 2);
    put_bytes(b, name, len);
}

/* a step listing every id below n */
static void rec_step(buf *b, long step, uint32_t n) {
    put(b, 2, 1);
    put(b, (uint64_t)step, 8);
    put(b, n, 4);
    for (uint32_t id = 0; id < n; id++) {
        put(b, id, 4);
        put(b, 0x1000 + id, 8);
        put(b, (uint64_t)step, 8);
    }
}

static void trace_header(buf *b, uint32_t version, uint32_t flags) {
    put_bytes(b, "DCKTRAC", 8);
    put(b, version, 4);
    put(b, flags, 4);
}

static void trace_name(buf *b, uint32_t id, const char *name, size_t len) {
    put(b, 1, 1);
    put(b, id, 4);
    put(b, len, 2);
    put_bytes(b, name, len);
}

/* a step of one forward event per module id below n, each with its
 * parameters' input and one output; present: bit k set, slot k (0 the
 * input, 1 the output) has a digest, else it is absent (digest zero) */
static void trace_step_slots(buf *b, long step, uint32_t n, unsigned present) {
    put(b, 2, 1);
    put(b, (uint64_t)step, 8);
    put(b, n, 4);
    put(b, 0, 1);
    for (uint32_t id = 0; id < n; id++) {
        put(b, DCK_TRACE_FORWARD, 1);
        put(b, DCK_TRACE_MODULE, 1);
        put(b, id, 4);
        put(b, DCK_TRACE_NO_OP, 4);
        put(b, 0, 4);
        put(b, 1, 1);
        put(b, 1, 1);
        for (int k = 0; k < 2; k++) {
            bool has = present >> k & 1;
            put(b, has, 1);
            put(b, has ? 0x2000 + id : 0, 8);
            put(b, has ? (uint64_t)(step * 2 + k) : 0, 8);
        }
    }
}

static void trace_step(buf *b, long step, uint32_t n) {
    trace_step_slots(b, step, n, 3);
}

/* ------------------------------------------------------------------ the two formats */

typedef struct {
    size_t nnames, nsteps;
} counts;

static dck_status rec_parse(const char *label, const uint8_t *d, size_t n, counts *c) {
    dck_recording r;
    dck_status s = dck_recording_parse(label, d, n, &r);
    *c = (counts){r.nnames, r.nsteps};
    dck_recording_release(&r);
    return s;
}

static dck_status rec_load(const char *path, counts *c) {
    dck_recording r;
    dck_status s = dck_recording_load(path, &r);
    *c = (counts){r.nnames, r.nsteps};
    dck_recording_release(&r);
    return s;
}

static dck_status trace_parse(const char *label, const uint8_t *d, size_t n, counts *c) {
    dck_trace t;
    dck_status s = dck_trace_parse(label, d, n, &t);
    *c = (counts){t.nnames, t.nsteps};
    dck_trace_release(&t);
    return s;
}

static dck_status trace_load(const char *path, counts *c) {
    dck_trace t;
    dck_status s = dck_trace_load(path, &t);
    *c = (counts){t.nnames, t.nsteps};
    dck_trace_release(&t);
    return s;
}

/* One row per format: how to write it, read it, and the messages its
 * framing gives (the CLI tests and the Python package check the same
 * text). name_head: a NAME record's bytes between its type and its name. */
static const struct fmt {
    const char *file;
    void (*header)(buf *, uint32_t version, uint32_t flags);
    void (*name)(buf *, uint32_t id, const char *name, size_t len);
    void (*step)(buf *, long step, uint32_t n);
    dck_status (*parse)(const char *label, const uint8_t *d, size_t n, counts *c);
    dck_status (*load)(const char *path, counts *c);
    uint32_t version, bad_version;
    size_t name_head;
    const char *no_header, *reads, *bad_id_msg, *not_utf8_msg, *twice_msg;
    const char *empty_name_msg; /* NULL: an empty name is a name */
} fmts[] = {
    {"tensor_digests.bin", rec_header, rec_name, rec_step, rec_parse, rec_load, 1, 2, 7,
     "F: byte 0: not a detcheck tensor digest file (no DCKTDIG header)",
     "1",
     "F: byte %zu: name record with id 5 kind 1 (expected id 1, kind 0..3)",
     "F: byte 16: name of tensor id 0 is not UTF-8 (byte 0x%02x at byte %d)",
     "F: tensor a (parameter) is named twice, as ids 0 and 2",
     NULL},
    {"trace.bin", trace_header, trace_name, trace_step, trace_parse, trace_load, 2, 3, 6,
     "F: byte 0: not a detcheck trace file (no DCKTRAC header)",
     "1 to 2",
     "F: byte %zu: name record with id 5 (expected id 1)",
     "F: byte 16: name id 0 is not UTF-8 (byte 0x%02x at byte %d)",
     "F: byte 32: name a recorded twice, as ids 0 and 2",
     "F: byte 16: name id 0 is empty"},
};
enum { NFMTS = sizeof fmts / sizeof fmts[0] };

/* f's reading of b fails with status and the message fmt, ... */
static void assert_refused(const struct fmt *f, const buf *b, dck_status status, const char *fmt, ...) {
    char want[512];
    counts c;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(want, sizeof want, fmt, ap);
    va_end(ap);
    ck_assert_int_eq(f->parse("F", b->b, b->n, &c), status);
    ck_assert_str_eq(dck_last_error(), want);
}

/* ------------------------------------------------------------------ framing */

/* A killed run leaves its last record cut anywhere: every cut reads as the
 * records before it, the torn one dropped whole (never half a step). */
START_TEST(torn_last_record_dropped) {
    for (int k = 0; k < NFMTS; k++) {
        const struct fmt *f = &fmts[k];
        buf b = {.n = 0};
        size_t ends[5], names_before[5], steps_before[5], nrec = 0;
        f->header(&b, f->version, 0);
        f->name(&b, 0, "a", 1);
        ends[nrec] = b.n, names_before[nrec] = 1, steps_before[nrec++] = 0;
        f->step(&b, 1, 1);
        ends[nrec] = b.n, names_before[nrec] = 1, steps_before[nrec++] = 1;
        f->name(&b, 1, "layer.b", 7);
        ends[nrec] = b.n, names_before[nrec] = 2, steps_before[nrec++] = 1;
        f->step(&b, 2, 2);
        ends[nrec] = b.n, names_before[nrec] = 2, steps_before[nrec++] = 2;
        for (size_t len = 16; len <= b.n; len++) {
            counts c, want = {0, 0};
            for (size_t r = 0; r < nrec; r++)
                if (ends[r] <= len) want = (counts){names_before[r], steps_before[r]};
            ck_assert_msg(f->parse("F", b.b, len, &c) == DCK_OK, "%s cut at %zu: %s", f->file, len, dck_last_error());
            ck_assert_msg(c.nnames == want.nnames && c.nsteps == want.nsteps,
                          "%s cut at %zu: %zu names %zu steps, expected %zu and %zu", f->file, len, c.nnames,
                          c.nsteps, want.nnames, want.nsteps);
        }
    }
}
END_TEST

/* A torn record is dropped only when what it holds is sound: a damaged
 * head is damage, named at its record's offset, wherever the file ends. */
START_TEST(torn_record_still_checked) {
    for (int k = 0; k < NFMTS; k++) {
        const struct fmt *f = &fmts[k];
        buf b = {.n = 0};
        f->header(&b, f->version, 0);
        f->name(&b, 0, "a", 1);
        f->step(&b, 1, 1);
        size_t at = b.n;
        f->name(&b, 5, "name", 4);
        b.n -= 2; /* the file ends inside the name */
        assert_refused(f, &b, DCK_ERR_FORMAT, f->bad_id_msg, at);
    }
}
END_TEST

START_TEST(bad_header_refused) {
    for (int k = 0; k < NFMTS; k++) {
        const struct fmt *f = &fmts[k];
        buf b = {.n = 0};
        f->header(&b, f->version, 0);
        b.b[3] ^= 0x20; /* "DCKtDIG" */
        assert_refused(f, &b, DCK_ERR_FORMAT, "%s", f->no_header);
        b.n = 0;
        f->header(&b, f->version, 0);
        b.n = 12; /* shorter than a header: no header */
        assert_refused(f, &b, DCK_ERR_FORMAT, "%s", f->no_header);
        b.n = 0;
        f->header(&b, f->bad_version, 0);
        assert_refused(f, &b, DCK_ERR_UNSUPPORTED, "F: byte 8: version %u (this detcheck reads %s)", f->bad_version,
                       f->reads);
        b.n = 0;
        f->header(&b, 0, 0);
        assert_refused(f, &b, DCK_ERR_UNSUPPORTED, "F: byte 8: version 0 (this detcheck reads %s)", f->reads);
        b.n = 0;
        f->header(&b, f->version, 4);
        f->name(&b, 0, "a", 1);
        assert_refused(f, &b, DCK_ERR_UNSUPPORTED, "F: byte 12: flags 0x4 (this detcheck knows none)");
        b.n = 0;
        f->header(&b, f->version, 0);
        f->name(&b, 0, "a", 1);
        put(&b, 7, 1);
        assert_refused(f, &b, DCK_ERR_FORMAT, "F: byte %zu: unknown record type 7", b.n - 1);
    }
}
END_TEST

/* Names are compared, sorted and printed as C strings and carried into
 * UTF-8 reports: a NUL, a byte no UTF-8 sequence starts with, an overlong
 * form or a surrogate is refused, naming the record and the byte. */
START_TEST(name_not_utf8_refused) {
    static const struct {
        const char *name;
        size_t len, bad; /* the offending byte's index */
    } cases[] = {
        {"a\xff", 2, 1}, {"ab\0c", 4, 2}, {"\xc0\x80", 2, 0}, {"x\xed\xa0\x80", 4, 1}, {"\xe2\x82", 2, 0},
    };
    for (int k = 0; k < NFMTS; k++) {
        const struct fmt *f = &fmts[k];
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            buf b = {.n = 0};
            f->header(&b, f->version, 0);
            f->name(&b, 0, cases[i].name, cases[i].len);
            f->step(&b, 1, 1);
            assert_refused(f, &b, DCK_ERR_FORMAT, f->not_utf8_msg, (unsigned char)cases[i].name[cases[i].bad],
                           (int)(16 + 1 + f->name_head + cases[i].bad));
        }
        /* what UTF-8 allows is a name, kept whole */
        buf b = {.n = 0};
        counts c;
        f->header(&b, f->version, 0);
        f->name(&b, 0, "blocks.\xc3\xa9\xe2\x80\xae\xf0\x9f\x98\x80", 16);
        ck_assert_int_eq(f->parse("F", b.b, b.n, &c), DCK_OK);
        ck_assert_uint_eq(c.nnames, 1);
    }
}
END_TEST

START_TEST(name_rules) {
    for (int k = 0; k < NFMTS; k++) {
        const struct fmt *f = &fmts[k];
        buf b = {.n = 0};
        counts c;
        f->header(&b, f->version, 0);
        f->name(&b, 0, "", 0);
        if (f->empty_name_msg) {
            assert_refused(f, &b, DCK_ERR_FORMAT, "%s", f->empty_name_msg);
        } else {
            ck_assert_int_eq(f->parse("F", b.b, b.n, &c), DCK_OK);
            ck_assert_uint_eq(c.nnames, 1);
        }
        /* each name once: two ids of one name would pair the wrong entries */
        b.n = 0;
        f->header(&b, f->version, 0);
        f->name(&b, 0, "a", 1);
        f->name(&b, 1, "b", 1);
        f->name(&b, 2, "a", 1);
        assert_refused(f, &b, DCK_ERR_FORMAT, "%s", f->twice_msg);
    }
    /* a tensor digest name is one per kind: a parameter and its gradient
     * share it */
    buf b = {.n = 0};
    dck_recording r;
    rec_header(&b, 1, 0);
    rec_name(&b, 0, "w", 1);
    b.b[b.n - 4] = DCK_REC_GRADIENT;
    rec_name(&b, 1, "w", 1);
    ck_assert_int_eq(dck_recording_parse("F", b.b, b.n, &r), DCK_OK);
    ck_assert_uint_eq(r.nnames, 2);
    ck_assert_uint_eq(r.kinds[0], DCK_REC_GRADIENT);
    ck_assert_uint_eq(r.kinds[1], DCK_REC_PARAMETER);
    dck_recording_release(&r);
    /* and a kind the format has none of is damage */
    b.n = 0;
    rec_header(&b, 1, 0);
    rec_name(&b, 0, "w", 1);
    b.b[b.n - 4] = DCK_REC_KIND_COUNT;
    assert_refused(&fmts[0], &b, DCK_ERR_FORMAT, "F: byte 16: name record with id 0 kind 4 (expected id 0, kind 0..3)");
}
END_TEST

/* The same reading from a file (what bisect opens), messages naming it; a
 * path that is no regular file is refused before any read (a FIFO would
 * block). */
START_TEST(file_reading) {
    char *dir = tu_tmpdir();
    ck_assert_ptr_nonnull(dir);
    for (int k = 0; k < NFMTS; k++) {
        const struct fmt *f = &fmts[k];
        char *p = tu_path(dir, f->file);
        buf b = {.n = 0};
        counts c;
        f->header(&b, f->version, 0);
        f->name(&b, 0, "a", 1);
        f->step(&b, 1, 1);
        f->step(&b, 2, 1);
        tu_write(p, b.b, b.n - 3);
        ck_assert_int_eq(f->load(p, &c), DCK_OK);
        ck_assert_uint_eq(c.nnames, 1);
        ck_assert_uint_eq(c.nsteps, 1);
        b.b[16] = 9;
        tu_write(p, b.b, b.n);
        char want[4200];
        snprintf(want, sizeof want, "%s: byte 16: unknown record type 9", p);
        ck_assert_int_eq(f->load(p, &c), DCK_ERR_FORMAT);
        ck_assert_str_eq(dck_last_error(), want);
        ck_assert_int_eq(f->load(dir, &c), DCK_ERR_IO);
        ck_assert_ptr_nonnull(strstr(dck_last_error(), dir));
        free(p);
    }
    tu_tmpdir_free(dir);
}
END_TEST

/* ------------------------------------------------------------------ trajectory.jsonl */

/* One reader of trajectory.jsonl for every command: the lr as written (a
 * double, NaN for null) beside its float32 bits, and step_time_s (NaN when
 * absent or not a number >= 0), which repro --tax times. */
START_TEST(trajectory_line_values) {
    static const struct {
        const char *line;
        double lr, t;
    } cases[] = {
        {"{\"step\": 3, \"loss_bits\": \"3f800000\", \"grad_norm_bits\": \"00000000\", \"lr\": 0.1, "
         "\"step_time_s\": 0.25}\n", 0.1, 0.25},
        {"{\"step\": 3, \"loss_bits\": \"3f800000\", \"grad_norm_bits\": \"00000000\", \"lr\": null}", NAN, NAN},
        {"{\"step\": 3, \"loss_bits\": \"3f800000\", \"grad_norm_bits\": \"00000000\", \"lr\": 3e-4, "
         "\"step_time_s\": -1}", 3e-4, NAN},
        {"{\"step\": 3, \"loss_bits\": \"3f800000\", \"grad_norm_bits\": \"00000000\", \"lr\": 1, "
         "\"step_time_s\": \"fast\"}", 1.0, NAN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dck_traj_rec r;
        ck_assert_int_eq(dck_traj_parse_line(cases[i].line, strlen(cases[i].line), "t.jsonl", 1, &r), DCK_OK);
        ck_assert_int_eq(r.step, 3);
        if (isnan(cases[i].lr)) ck_assert(isnan(r.lr) && r.lr_bits == 0);
        else ck_assert(r.lr == cases[i].lr && r.lr_bits == dck_f32_bits((float)cases[i].lr));
        if (isnan(cases[i].t)) ck_assert(isnan(r.step_time_s));
        else ck_assert(r.step_time_s == cases[i].t);
    }
}
END_TEST

/* What the writer appends, the reader reads back: the same bits, a value
 * that is not finite as null (its bits kept for loss and grad norm), and
 * the lr as dck_traj_as_read says a reader takes it. */
START_TEST(trajectory_written_reads_back) {
    char *dir = tu_tmpdir();
    ck_assert_ptr_nonnull(dir);
    char *p = tu_path(dir, DCK_TRAJECTORY);
    dck_digest root = {.high64 = 0x0123456789abcdefULL, .low64 = 0xfedcba9876543210ULL};
    const dck_traj_rec w[] = {
        {.step = 1, .loss_bits = dck_f32_bits(2.5f), .grad_norm_bits = dck_f32_bits(0.1f), .lr_bits = dck_f32_bits(3e-4f),
         .has_root = true, .root = root},
        {.step = 2, .loss_bits = dck_f32_bits(NAN), .grad_norm_bits = dck_f32_bits(-INFINITY),
         .lr_bits = dck_f32_bits(1.0f / 3.0f)},
        {.step = 5, .loss_bits = 0x00000001u /* the least subnormal */, .grad_norm_bits = dck_f32_bits(-0.0f),
         .lr_bits = dck_f32_bits(INFINITY)},
    };
    enum { N = sizeof w / sizeof w[0] };
    FILE *f = fopen(p, "ab");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < N; i++) ck_assert_int_eq(dck_traj_append(f, p, &w[i]), DCK_OK);
    fclose(f);
    dck_traj_rec *r = NULL;
    size_t n = 0;
    ck_assert_int_eq(dck_traj_load(p, &r, &n), DCK_OK);
    ck_assert_uint_eq(n, N);
    for (int i = 0; i < N; i++) {
        dck_traj_rec want = dck_traj_as_read(&w[i]);
        ck_assert_int_eq(r[i].step, w[i].step);
        ck_assert_uint_eq(r[i].loss_bits, w[i].loss_bits);
        ck_assert_uint_eq(r[i].grad_norm_bits, w[i].grad_norm_bits);
        ck_assert_uint_eq(r[i].lr_bits, want.lr_bits);
        ck_assert(isnan(want.lr) ? isnan(r[i].lr) : r[i].lr == want.lr);
        ck_assert(isnan(r[i].step_time_s) && isnan(want.step_time_s));
        ck_assert(r[i].has_root == w[i].has_root && (!w[i].has_root || dck_digest_equal(r[i].root, root)));
    }
    ck_assert_uint_eq(r[0].lr_bits, dck_f32_bits(3e-4f));
    ck_assert_uint_eq(r[2].lr_bits, 0); /* null */
    long step;
    char what[256];
    ck_assert_int_eq(dck_traj_compare(r, n, r, n, &step, what, sizeof what), 0);
    free(r);
    free(p);
    tu_tmpdir_free(dir);
}
END_TEST

/* A torn last line (a killed run) is no record; a damaged or out-of-order
 * line before it is damage, named by file and line. */
START_TEST(trajectory_torn_and_damaged) {
    static const char ok1[] = "{\"step\":1,\"loss_bits\":\"3f800000\",\"grad_norm_bits\":\"00000000\",\"lr\":0.1}\n",
                      ok2[] = "{\"step\":2,\"loss_bits\":\"3f800000\",\"grad_norm_bits\":\"00000000\",\"lr\":0.1}\n";
    static const struct {
        const char *tail;
        dck_status status;
        size_t n;
        const char *msg; /* after "PATH:" */
    } cases[] = {
        {"{\"step\":3,\"loss_bi", DCK_OK, 2, NULL},
        {"{\"step\":3,\"loss_bits\":\"3f800000\",\"grad_norm_bits\":\"00000000\",\"lr\":0.1}", DCK_OK, 3, NULL},
        {"not json\n", DCK_ERR_FORMAT, 0, "3: not a JSON object"},
        {"{\"step\":3}\n", DCK_ERR_FORMAT, 0, "3: needs step, loss_bits, grad_norm_bits and lr"},
        {"{\"step\":1,\"loss_bits\":\"3f800000\",\"grad_norm_bits\":\"00000000\",\"lr\":0.1}\n", DCK_ERR_FORMAT, 0,
         "3: step 1 does not follow step 2"},
    };
    char *dir = tu_tmpdir();
    ck_assert_ptr_nonnull(dir);
    char *p = tu_path(dir, DCK_TRAJECTORY);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "%s%s%s", ok1, ok2, cases[i].tail);
        tu_write(p, text, strlen(text));
        dck_traj_rec *r = NULL;
        size_t n = 0;
        ck_assert_int_eq(dck_traj_load(p, &r, &n), cases[i].status);
        ck_assert_uint_eq(n, cases[i].n);
        if (cases[i].msg) {
            char want[4200];
            snprintf(want, sizeof want, "%s:%s", p, cases[i].msg);
            ck_assert_str_eq(dck_last_error(), want);
        }
        free(r);
    }
    free(p);
    tu_tmpdir_free(dir);
}
END_TEST

/* A full disk stops the run with the file's name: a record is never
 * thinned out. */
START_TEST(trajectory_full_disk) {
    FILE *f = fopen("/dev/full", "ab");
    if (!f) TU_SKIP("no /dev/full: the full-disk case of the trajectory writer did not run");
    dck_traj_rec w = {.step = 1, .loss_bits = dck_f32_bits(1.0f)};
    ck_assert_int_eq(dck_traj_append(f, "run/trajectory.jsonl", &w), DCK_ERR_IO);
    ck_assert_str_eq(dck_last_error(), "run/trajectory.jsonl: cannot write: No space left on device");
    fclose(f);
}
END_TEST

/* Outputs absent in both traces are equal, but no evidence: a step both
 * traced where every output is absent (digests that failed, as CUDA
 * tensors without a working GPU digest) compared nothing, and the
 * comparison of the runs refuses it rather than calling them identical. */
START_TEST(trace_absent_outputs_are_no_agreement) {
    static const struct {
        unsigned step2[2]; /* step 2's present bits in trace A, B */
        bool found;
        size_t blind;
    } cases[] = {
        {{3, 3}, false, 0}, /* everything present: agreement with evidence */
        {{1, 1}, false, 1}, /* outputs absent in both: nothing compared at step 2 */
        {{0, 0}, false, 1}, /* every slot absent */
        {{3, 1}, true, 0},  /* present in one run only: a difference, as before */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dck_trace t[2];
        for (int k = 0; k < 2; k++) {
            buf b = {.n = 0};
            trace_header(&b, 2, 0);
            trace_name(&b, 0, "m", 1);
            trace_name(&b, 1, "n", 1);
            trace_step(&b, 1, 2);
            trace_step_slots(&b, 2, 2, cases[i].step2[k]);
            trace_step(&b, 3, 2);
            ck_assert_int_eq(dck_trace_parse("T", b.b, b.n, &t[k]), DCK_OK);
        }
        dck_trace_diff d;
        ck_assert_int_eq(dck_trace_compare(&t[0], &t[1], &d), cases[i].found);
        ck_assert_uint_eq(d.blind, cases[i].blind);
        ck_assert_int_eq(d.first_blind, cases[i].blind ? 2 : -1);
        dck_runs_trace r;
        memset(&r, 0, sizeof r);
        dck_status st = dck_runs_trace_from(&t[0], &t[1], &d, &r);
        if (cases[i].blind) {
            ck_assert_int_eq(st, DCK_ERR_FORMAT);
            ck_assert_str_eq(dck_last_error(), "trace.bin: step 2 (and 0 more) traced in both runs, but none of its "
                                               "events' outputs has a digest in either (the recorder could not digest "
                                               "them): nothing was compared there");
        } else {
            ck_assert_int_eq(st, DCK_OK);
        }
        dck_runs_trace_release(&r);
        for (int k = 0; k < 2; k++) dck_trace_release(&t[k]);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("runs");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, torn_last_record_dropped);
    tcase_add_test(tc, torn_record_still_checked);
    tcase_add_test(tc, bad_header_refused);
    tcase_add_test(tc, name_not_utf8_refused);
    tcase_add_test(tc, name_rules);
    tcase_add_test(tc, file_reading);
    tcase_add_test(tc, trajectory_line_values);
    tcase_add_test(tc, trajectory_written_reads_back);
    tcase_add_test(tc, trajectory_torn_and_damaged);
    tcase_add_test(tc, trajectory_full_disk);
    tcase_add_test(tc, trace_absent_outputs_are_no_agreement);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

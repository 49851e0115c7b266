/* libFuzzer target: the readers of a recorded run (detcheck bisect),
 * tensor_digests.bin and trajectory.jsonl, on the input's bytes.
 * The side file is read twice, from memory (dck_recording_parse) and from a
 * file (dck_recording_load, the descriptor path bisect takes): both must
 * agree, status and content. What is read must hold the format's promises
 * (ids named, steps ascending, no id twice in a step, names UTF-8 without
 * NUL) and compare equal to itself. The trajectory reader must give steps
 * in ascending order that compare equal to themselves. */
#include "detcheck.h"
#include "core/core.h"
#include "runs/trajectory.h"
#include "runs/recording.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *tmp_path(const char *what) {
    static char paths[2][256];
    int k = what[0] == 't';
    if (!paths[k][0]) snprintf(paths[k], sizeof paths[k], "/tmp/dck-fuzz-record-%d.%s", (int)getpid(), what);
    return paths[k];
}

static int write_file(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

#define CHECK(c, ...)                                                                              \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void same_recording(const dck_recording *a, const dck_recording *b) {
    CHECK(a->nnames == b->nnames && a->nsteps == b->nsteps && a->nentries == b->nentries,
          "memory and file readings differ in size");
    for (size_t i = 0; i < a->nnames; i++)
        CHECK(!strcmp(a->names[i], b->names[i]) && a->kinds[i] == b->kinds[i], "name %zu differs", i);
    CHECK(!a->nsteps || !memcmp(a->steps, b->steps, a->nsteps * sizeof *a->steps), "steps differ");
    CHECK(!a->nentries || !memcmp(a->entries, b->entries, a->nentries * sizeof *a->entries), "entries differ");
}

static void promises(const dck_recording *r) {
    for (size_t i = 0; i < r->nnames; i++) {
        CHECK(r->kinds[i] < DCK_REC_KIND_COUNT, "kind %u", r->kinds[i]);
        CHECK(dck_utf8_valid(r->names[i], strlen(r->names[i])), "name %zu is not UTF-8", i);
    }
    size_t next = 0;
    for (size_t s = 0; s < r->nsteps; s++) {
        const dck_rec_step *st = &r->steps[s];
        CHECK(!s || r->steps[s - 1].step < st->step, "steps out of order");
        CHECK(st->first == next && st->n <= r->nnames, "step %zu's entries", s);
        for (size_t k = 0; k < st->n; k++) {
            CHECK(r->entries[st->first + k].id < r->nnames, "id past the names");
            for (size_t j = 0; j < k; j++)
                CHECK(r->entries[st->first + j].id != r->entries[st->first + k].id, "id twice in a step");
        }
        next += st->n;
    }
    CHECK(next == r->nentries, "entries outside the steps");
    long step;
    int kind;
    char name[64];
    const char *how;
    CHECK(dck_recording_compare(r, r, &step, &kind, name, sizeof name, &how) == 0, "a recording differs from itself");
    CHECK(dck_recording_common_steps(r, r) == r->nsteps, "common steps with itself");
    dck_rec_state_only u;
    CHECK(dck_recording_state_only(r, r, &u) == 0 && !u.count[0] && !u.count[1], "state in one of two equal runs");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dck_recording a, b;
    dck_status sa = dck_recording_parse("fuzz", data, size, &a);
    const char *pr = tmp_path("bin"), *pt = tmp_path("traj");
    if (!write_file(pr, data, size) || !write_file(pt, data, size)) abort();
    dck_status sb = dck_recording_load(pr, &b);
    CHECK(sa == sb, "memory reading %d, file reading %d (%s)", (int)sa, (int)sb, dck_last_error());
    if (!sa) {
        same_recording(&a, &b);
        promises(&a);
    }
    dck_recording_release(&a);
    dck_recording_release(&b);

    dck_traj_rec *v = NULL;
    size_t n = 0;
    if (dck_traj_load(pt, &v, &n) == DCK_OK) {
        for (size_t i = 1; i < n; i++) CHECK(v[i - 1].step < v[i].step, "trajectory steps out of order");
        long step;
        char what[64];
        CHECK(dck_traj_compare(v, n, v, n, &step, what, sizeof what) == 0, "a trajectory differs from itself");
        free(v);
    }
    return 0;
}

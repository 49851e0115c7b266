/* The resume diagnosis (src/runs/resume.c) on small runs held in memory:
 * an uninterrupted run of steps 1..8, a run resumed from K = 4 (steps
 * 5..8) and a run stopped at 4. Runs that agree give no parting and no
 * gap; a difference at the first resumed step is named with its cause
 * (weights, data, RNG, lr, scaler, EMA, optimizer, a tensor, the
 * trajectory); what one run recorded and the other did not (a step, a
 * root, a state entry, digests, a traced step, a cut trace) is a gap,
 * never agreement; two runs of the same command that part before the stop
 * say what was equal and where the difference arises. The command line's
 * words for them: tests/cli/test_resume_user.sh. */
#include "testutil.h"
#include "runs/resume.h"

#include <math.h>

enum { K = 4, LAST = 8, CAP = 256 };

/* A run in memory: its trajectory and its tensor digests. */
typedef struct {
    dck_traj_rec traj[LAST + 1];
    size_t ntraj;
    char *names[CAP];
    uint8_t kinds[CAP];
    dck_rec_step steps[LAST + 1];
    dck_rec_entry entries[CAP];
    dck_recording rec;
    bool has_rec;
} mrun;

static dck_digest H(uint64_t v) { return (dck_digest){v * 0x9e3779b97f4a7c15ull + 1, v}; }

static uint32_t id_of(mrun *r, int kind, const char *name) {
    for (size_t i = 0; i < r->rec.nnames; i++)
        if (r->kinds[i] == kind && !strcmp(r->names[i], name)) return (uint32_t)i;
    ck_assert_uint_lt(r->rec.nnames, CAP);
    r->names[r->rec.nnames] = (char *)name;
    r->kinds[r->rec.nnames] = (uint8_t)kind;
    return (uint32_t)r->rec.nnames++;
}

static void add(mrun *r, long step, int kind, const char *name, uint64_t v) {
    dck_recording *c = &r->rec;
    if (!c->nsteps || c->steps[c->nsteps - 1].step != step)
        c->steps[c->nsteps++] = (dck_rec_step){.step = step, .n = 0, .first = c->nentries};
    ck_assert_uint_lt(c->nentries, CAP);
    c->entries[c->nentries++] = (dck_rec_entry){id_of(r, kind, name), H(v)};
    c->steps[c->nsteps - 1].n++;
}

/* What the steps of a run hold, as a training script's recorder writes
 * them: the step's batch and state, the gradient, the weights after the
 * update and the optimizer's moment; the first step of a process also the
 * weights it started from (start.w). A digest is a function of the step,
 * so that two runs agree step by step. */
static void std_step(mrun *r, long s, bool first) {
    add(r, s, DCK_REC_STATE, "data.batch", 100 + (uint64_t)s);
    add(r, s, DCK_REC_STATE, "rng.torch", 200 + (uint64_t)s);
    add(r, s, DCK_REC_STATE, "lr.0", 300);
    add(r, s, DCK_REC_STATE, "scaler.scale", 400);
    add(r, s, DCK_REC_STATE, "ema.w", 500 + (uint64_t)s);
    if (first) add(r, s, DCK_REC_STATE, "start.w", 700 + (uint64_t)s - 1);
    add(r, s, DCK_REC_GRADIENT, "w", 600 + (uint64_t)s);
    add(r, s, DCK_REC_PARAMETER, "w", 700 + (uint64_t)s);
    add(r, s, DCK_REC_OPTIMIZER, "w.exp_avg", 800 + (uint64_t)s);
}

static void traj_line(mrun *r, long s) {
    r->traj[r->ntraj++] = (dck_traj_rec){.step = s, .loss_bits = 1000 + (uint32_t)s, .grad_norm_bits = 2000,
                                         .lr_bits = 0x3dcccccd, .lr = 0.1, .step_time_s = NAN, .has_root = true,
                                         .root = H(3000 + (uint64_t)s)};
}

/* A run that recorded steps lo..hi (none when lo > hi). */
static void run_of(mrun *r, long lo, long hi) {
    memset(r, 0, sizeof *r);
    r->rec.names = r->names;
    r->rec.kinds = r->kinds;
    r->rec.steps = r->steps;
    r->rec.entries = r->entries;
    r->has_rec = true;
    for (long s = lo; s <= hi; s++) {
        traj_line(r, s);
        std_step(r, s, s == lo);
    }
}

static dck_resume_view view(const mrun *r) { return (dck_resume_view){r->traj, r->ntraj, r->has_rec ? &r->rec : NULL}; }

/* The entry of step, kind, name: set to the digest of v. */
static void set_entry(mrun *r, long step, int kind, const char *name, uint64_t v) {
    for (size_t i = 0; i < r->rec.nsteps; i++) {
        const dck_rec_step *st = &r->rec.steps[i];
        for (size_t k = 0; st->step == step && k < st->n; k++) {
            dck_rec_entry *e = &r->entries[st->first + k];
            if (r->kinds[e->id] == kind && !strcmp(r->names[e->id], name)) {
                e->digest = H(v);
                return;
            }
        }
    }
    ck_abort_msg("no entry %s of step %ld", name, step);
}

static dck_traj_rec *traj_at(mrun *r, long step) {
    for (size_t i = 0; i < r->ntraj; i++)
        if (r->traj[i].step == step) return &r->traj[i];
    ck_abort_msg("no trajectory line of step %ld", step);
    return NULL;
}

/* Drops the trajectory line of step. */
static void drop_traj(mrun *r, long step) {
    dck_traj_rec *t = traj_at(r, step);
    size_t i = (size_t)(t - r->traj);
    memmove(t, t + 1, (r->ntraj - i - 1) * sizeof *t);
    r->ntraj--;
}

/* Drops the digests of step (the recording's step and its entries). */
static void drop_digests(mrun *r, long step) {
    dck_recording *c = &r->rec;
    for (size_t i = 0; i < c->nsteps; i++) {
        if (c->steps[i].step != step) continue;
        memmove(&c->steps[i], &c->steps[i + 1], (c->nsteps - i - 1) * sizeof *c->steps);
        c->nsteps--;
        return;
    }
    ck_abort_msg("no digests of step %ld", step);
}

static dck_resume_gap gap_of(const mrun *a, const mrun *b, long lo, long hi) {
    dck_resume_view x = view(a), y = view(b);
    dck_resume_gap g;
    ck_assert_int_eq(dck_resume_first_gap(&x, &y, lo, hi, &g), DCK_OK);
    return g;
}

static dck_resume_parting *parting_of(const mrun *a, const mrun *b) {
    static dck_resume_parting p; /* 64 KiB: a name whole */
    dck_resume_view x = view(a), y = view(b);
    ck_assert_int_eq(dck_resume_first_parting(&x, &y, &p), DCK_OK);
    return &p;
}

START_TEST(agreeing_runs) {
    static mrun full, stop, res;
    run_of(&full, 1, LAST);
    run_of(&stop, 1, K);
    run_of(&res, K + 1, LAST);
    /* the stop run is the uninterrupted run up to K, the resumed run from K+1 */
    ck_assert_int_eq(parting_of(&full, &stop)->step, -1);
    ck_assert_int_eq(gap_of(&full, &stop, 1, K).step, -1);
    ck_assert_int_eq(parting_of(&full, &res)->step, -1);
    /* the resumed process's start.w (its first step only) is no state
     * entry one run lacks: it is compared with the weights after K */
    ck_assert_int_eq(gap_of(&full, &res, K + 1, LAST).step, -1);
    dck_resume_view f = view(&full), r = view(&res);
    const char *w = "x";
    ck_assert_int_eq(dck_resume_start_differing(&f, &r, K, &w), DCK_OK);
    ck_assert_ptr_null(w);
}
END_TEST

/* One resume mistake per row: what the resumed run's step K+1 (or K+2)
 * holds instead, and the cause it is named with. */
typedef struct {
    const char *what;
    int kind; /* the entry changed; -1: the trajectory's lr, -2: its loss at K+2, -3: gradient w
               * and optimizer state w.exp_avg */
    const char *entry;
    uint64_t v;
    dck_resume_cause cause;
    const char *name; /* the name the diagnosis gives (NULL: none) */
} mistake;

static const mistake mistakes[] = {
    {"weights before K's update", DCK_REC_STATE, "start.w", 700 + K - 1, DCK_RESUME_WEIGHTS, "w"},
    {"the loader restarted", DCK_REC_STATE, "data.batch", 100 + 1, DCK_RESUME_DATA, "data.batch"},
    {"torch's RNG not restored", DCK_REC_STATE, "rng.torch", 12345, DCK_RESUME_RNG, "rng.torch"},
    {"the scheduler stepped once more", DCK_REC_STATE, "lr.0", 301, DCK_RESUME_LR, "lr.0"},
    {"the trajectory's lr", -1, NULL, 0, DCK_RESUME_LR, NULL},
    {"the GradScaler not restored", DCK_REC_STATE, "scaler.scale", 65536, DCK_RESUME_SCALER, "scaler.scale"},
    {"the EMA not restored", DCK_REC_STATE, "ema.w", 1, DCK_RESUME_EMA, "ema.w"},
    {"the optimizer state not restored", DCK_REC_OPTIMIZER, "w.exp_avg", 1, DCK_RESUME_OPTIMIZER, "w.exp_avg"},
    {"a gradient, nothing restored differs", DCK_REC_GRADIENT, "w", 1, DCK_RESUME_TENSOR, NULL},
    /* the optimizer's state is the cause only when the gradients agree */
    {"a gradient and the optimizer state", -3, NULL, 0, DCK_RESUME_TENSOR, NULL},
    {"the loss of the second resumed step", -2, NULL, 0, DCK_RESUME_TRAJECTORY, NULL},
};

START_TEST(a_parting_is_named_with_its_cause) {
    static mrun full, res;
    const mistake *m = &mistakes[_i];
    run_of(&full, 1, LAST);
    run_of(&res, K + 1, LAST);
    long D = K + 1;
    if (m->kind == -1) {
        traj_at(&res, D)->lr_bits = 0x3e4ccccd;
        traj_at(&res, D)->lr = 0.2;
    } else if (m->kind == -2) {
        D = K + 2;
        traj_at(&res, D)->loss_bits ^= 1;
    } else if (m->kind == -3) {
        set_entry(&res, D, DCK_REC_GRADIENT, "w", 1);
        set_entry(&res, D, DCK_REC_OPTIMIZER, "w.exp_avg", 1);
    } else {
        set_entry(&res, D, m->kind, m->entry, m->v);
        /* weights that are not those after K: the step's update starts
         * from them, so the weights after it differ too */
        if (m->cause == DCK_RESUME_WEIGHTS) set_entry(&res, D, DCK_REC_PARAMETER, "w", 1);
    }
    const dck_resume_parting *p = parting_of(&full, &res);
    ck_assert_msg(p->step == D, "%s: parted at %ld, not %ld", m->what, p->step, D);
    ck_assert_int_eq(gap_of(&full, &res, K + 1, LAST).step, -1);
    dck_resume_view f = view(&full), r = view(&res);
    dck_resume_diagnosis d;
    ck_assert_int_eq(dck_resume_diagnose(&f, &r, K, p, &d), DCK_OK);
    ck_assert_msg(d.cause == m->cause, "%s: cause %s, not %s", m->what, dck_resume_cause_name(d.cause),
                  dck_resume_cause_name(m->cause));
    if (m->name) ck_assert_str_eq(d.name, m->name);
    else ck_assert_ptr_null(d.name);
    switch (m->cause) {
    case DCK_RESUME_DATA: ck_assert_int_eq(d.batch_step, 1); break; /* the batch of step 1 */
    case DCK_RESUME_RNG: ck_assert_str_eq(dck_resume_rngs[d.rng].name, "rng.torch"); break;
    case DCK_RESUME_LR:
        ck_assert(d.lr_traj == (m->kind == -1));
        if (d.lr_traj) ck_assert(d.lr[0] == 0.1 && d.lr[1] == 0.2);
        break;
    case DCK_RESUME_TENSOR:
        ck_assert_int_eq(p->rstep, D);
        ck_assert_int_eq(p->kind, DCK_REC_GRADIENT);
        ck_assert_str_eq(p->name, "w");
        break;
    case DCK_RESUME_TRAJECTORY:
        ck_assert_int_eq(p->tstep, D);
        ck_assert_int_eq(p->rstep, -1);
        ck_assert_ptr_nonnull(strstr(p->what, "loss_bits"));
        break;
    default: break;
    }
}
END_TEST

/* The weights the resumed process started from are compared even when
 * every later step agrees (the update hid them). */
START_TEST(other_starting_weights_are_found_alone) {
    static mrun full, res;
    run_of(&full, 1, LAST);
    run_of(&res, K + 1, LAST);
    set_entry(&res, K + 1, DCK_REC_STATE, "start.w", 1);
    ck_assert_int_eq(parting_of(&full, &res)->step, -1);
    dck_resume_view f = view(&full), r = view(&res);
    const char *w = NULL;
    ck_assert_int_eq(dck_resume_start_differing(&f, &r, K, &w), DCK_OK);
    ck_assert_ptr_nonnull(w);
    ck_assert_str_eq(w, "w");
}
END_TEST

/* What one run recorded and the other did not: a gap at its step, the run
 * that lacks it named, while every step both hold agrees. */
START_TEST(a_gap_is_not_agreement) {
    static mrun full, res;
    dck_resume_gap g;
    /* a hole in the resumed run's trajectory */
    run_of(&full, 1, LAST);
    run_of(&res, K + 1, LAST);
    drop_traj(&res, 6);
    ck_assert_int_eq(parting_of(&full, &res)->step, -1);
    g = gap_of(&full, &res, K + 1, LAST);
    ck_assert_int_eq(g.step, 6);
    ck_assert_int_eq(g.lacks, 1);
    ck_assert_str_eq(g.file, DCK_TRAJECTORY);
    ck_assert_int_eq(g.kind, DCK_RESUME_GAP_STEP);
    ck_assert(!g.ended);
    /* a resumed run that ended early */
    run_of(&res, K + 1, LAST - 1);
    ck_assert_int_eq(parting_of(&full, &res)->step, -1);
    g = gap_of(&full, &res, K + 1, LAST);
    ck_assert_int_eq(g.step, LAST);
    ck_assert_int_eq(g.lacks, 1);
    ck_assert_str_eq(g.file, DCK_TRAJECTORY);
    ck_assert(g.ended);
    /* the uninterrupted run digested no step 7 */
    run_of(&res, K + 1, LAST);
    drop_digests(&full, 7);
    g = gap_of(&full, &res, K + 1, LAST);
    ck_assert_int_eq(g.step, 7);
    ck_assert_int_eq(g.lacks, 0);
    ck_assert_str_eq(g.file, DCK_RECORD_FILE);
    /* one run recorded digests, the other none: every step is a gap */
    run_of(&full, 1, LAST);
    res.has_rec = false;
    g = gap_of(&full, &res, K + 1, LAST);
    ck_assert_int_eq(g.step, K + 1);
    ck_assert_int_eq(g.lacks, 1);
    ck_assert_str_eq(g.file, DCK_RECORD_FILE);
    /* a root digest in one run only */
    run_of(&res, K + 1, LAST);
    traj_at(&res, 6)->has_root = false;
    ck_assert_int_eq(parting_of(&full, &res)->step, -1);
    g = gap_of(&full, &res, K + 1, LAST);
    ck_assert_int_eq(g.step, 6);
    ck_assert_int_eq(g.kind, DCK_RESUME_GAP_ROOT);
    ck_assert_int_eq(g.lacks, 1);
    /* a state entry in one run only: no differing tensor, but a gap */
    run_of(&res, 1, 0);
    for (long s = K + 1; s <= LAST; s++) {
        traj_line(&res, s);
        std_step(&res, s, s == K + 1);
        if (s == 7) add(&res, s, DCK_REC_STATE, "rng.numpy", 9);
    }
    ck_assert_int_eq(parting_of(&full, &res)->step, -1);
    g = gap_of(&full, &res, K + 1, LAST);
    ck_assert_int_eq(g.step, 7);
    ck_assert_int_eq(g.kind, DCK_RESUME_GAP_STATE);
    ck_assert_int_eq(g.lacks, 0);
    ck_assert_str_eq(g.entry, "rng.numpy");
    /* outside lo..hi it is not this comparison's */
    ck_assert_int_eq(gap_of(&full, &res, K + 1, 6).step, -1);
}
END_TEST

/* Traces: a step traced in one run only, a step one run's recorder cut
 * shorter (gaps); steps both cut alike (counted, for the verdict). */
START_TEST(trace_gaps) {
    dck_trace_step sa[4], sb[4];
    dck_trace a = {.steps = sa}, b = {.steps = sb};
    dck_resume_gap g = {.step = -1};
    dck_resume_cut alike;
    for (long s = K + 1; s <= LAST; s++) {
        sa[a.nsteps++] = (dck_trace_step){.step = s, .n = 10};
        sb[b.nsteps++] = (dck_trace_step){.step = s, .n = 10};
    }
    dck_resume_trace_gaps(&a, &b, K + 1, LAST, &g, &alike);
    ck_assert_int_eq(g.step, -1);
    ck_assert_uint_eq(alike.steps, 0);
    /* traced in run a only */
    dck_resume_trace_gaps(&a, NULL, K + 1, LAST, &g, &alike);
    ck_assert_int_eq(g.step, K + 1);
    ck_assert_int_eq(g.lacks, 1);
    ck_assert_str_eq(g.file, DCK_TRACE_FILE);
    /* both cut step 6 alike, run b cut step 7 shorter */
    g = (dck_resume_gap){.step = -1};
    sa[1].truncated = sb[1].truncated = true;
    sa[2].truncated = sb[2].truncated = true;
    sb[2].n = 4;
    dck_resume_trace_gaps(&a, &b, K + 1, LAST, &g, &alike);
    ck_assert_int_eq(g.step, 7);
    ck_assert_int_eq(g.kind, DCK_RESUME_GAP_CUT);
    ck_assert_int_eq(g.lacks, 1);
    ck_assert_uint_eq(g.events, 4);
    ck_assert_uint_eq(alike.steps, 1);
    ck_assert_int_eq(alike.first, 6);
    ck_assert_int_eq(alike.last, 6);
    /* an earlier gap stays */
    dck_resume_gap earlier = {.step = 5, .file = DCK_TRAJECTORY};
    g = earlier;
    dck_resume_trace_gaps(&a, &b, K + 1, LAST, &g, &alike);
    ck_assert_int_eq(g.step, 5);
    ck_assert_str_eq(g.file, DCK_TRAJECTORY);
    /* a step traced in one run only */
    g = (dck_resume_gap){.step = -1};
    sa[1].truncated = sb[1].truncated = sa[2].truncated = sb[2].truncated = false;
    sb[2].n = 10;
    b.nsteps = 3; /* run b traced no step 8 */
    dck_resume_trace_gaps(&a, &b, K + 1, LAST, &g, &alike);
    ck_assert_int_eq(g.step, LAST);
    ck_assert_int_eq(g.lacks, 1);
    ck_assert_int_eq(g.kind, DCK_RESUME_GAP_STEP);
}
END_TEST

/* Two runs of the same command parting before the stop: what was equal
 * at the step, and where that puts the difference. */
START_TEST(a_parting_before_the_stop) {
    static mrun full, stop;
    run_of(&full, 1, LAST);
    run_of(&stop, 1, K);
    set_entry(&stop, 3, DCK_REC_PARAMETER, "w", 1);
    const dck_resume_parting *p = parting_of(&full, &stop);
    ck_assert_int_eq(p->step, 3);
    ck_assert_int_eq(p->kind, DCK_REC_PARAMETER);
    dck_resume_view f = view(&full), s = view(&stop);
    dck_resume_tally t;
    ck_assert_int_eq(dck_resume_tally_parting(&f, &s, p, &t), DCK_OK);
    ck_assert_int_eq(t.arises, DCK_RESUME_ARISES_UPDATE);
    ck_assert_uint_eq(t.n[DCK_REC_GRADIENT], 1);
    ck_assert_uint_eq(t.diff[DCK_REC_GRADIENT], 0);
    ck_assert_uint_eq(t.diff[DCK_REC_PARAMETER], 1);
    ck_assert(t.has_batch && t.batch_equal && t.has_rng && t.rng_equal);
    /* a gradient first, from an equal batch: forward or backward */
    run_of(&stop, 1, K);
    set_entry(&stop, 2, DCK_REC_GRADIENT, "w", 1);
    p = parting_of(&full, &stop);
    ck_assert_int_eq(p->step, 2);
    ck_assert_int_eq(dck_resume_tally_parting(&f, &s, p, &t), DCK_OK);
    ck_assert_int_eq(t.arises, DCK_RESUME_ARISES_FORWARD);
    /* the batch differs too: no place is named */
    set_entry(&stop, 2, DCK_REC_STATE, "data.batch", 1);
    p = parting_of(&full, &stop);
    ck_assert_int_eq(dck_resume_tally_parting(&f, &s, p, &t), DCK_OK);
    ck_assert(t.has_batch && !t.batch_equal);
    ck_assert_int_eq(t.arises, DCK_RESUME_ARISES_UNKNOWN);
}
END_TEST

/* The built-in trainer form: the reference and a resumed run of steps
 * 1..LAST. Agreeing trajectories give SAME; a differing record, a root
 * digest one run lacks, a missing step and a step never run are each a
 * difference, the first one named. */
START_TEST(trainer_trajectories) {
    mrun ref, res;
    run_of(&ref, 1, LAST);
    run_of(&res, 1, LAST);
    dck_resume_traj_verdict d;
    dck_resume_traj_check(ref.traj, ref.ntraj, res.traj, res.ntraj, LAST, &d);
    ck_assert_int_eq(d.kind, DCK_RESUME_TRAJ_SAME);
    ck_assert_int_eq(d.step, -1);
    /* a record differs */
    traj_at(&res, 6)->loss_bits ^= 1;
    dck_resume_traj_check(ref.traj, ref.ntraj, res.traj, res.ntraj, LAST, &d);
    ck_assert_int_eq(d.kind, DCK_RESUME_TRAJ_DIFFERS);
    ck_assert_int_eq(d.step, 6);
    ck_assert_str_ne(d.what, "");
    /* a root digest before it that the resumed run lacks comes first */
    traj_at(&res, 5)->has_root = false;
    dck_resume_traj_check(ref.traj, ref.ntraj, res.traj, res.ntraj, LAST, &d);
    ck_assert_int_eq(d.kind, DCK_RESUME_TRAJ_ROOT);
    ck_assert_int_eq(d.step, 5);
    ck_assert_int_eq(d.side, 1);
    ck_assert_str_eq(d.what, "");
    /* a step the reference lacks, before both */
    run_of(&res, 1, LAST);
    memmove(&ref.traj[2], &ref.traj[3], (ref.ntraj - 3) * sizeof ref.traj[0]); /* drop step 3 */
    ref.ntraj--;
    dck_resume_traj_check(ref.traj, ref.ntraj, res.traj, res.ntraj, LAST, &d);
    ck_assert_int_eq(d.kind, DCK_RESUME_TRAJ_MISSING);
    ck_assert_int_eq(d.step, 3);
    ck_assert_int_eq(d.side, 0);
    ck_assert_uint_eq(d.na, LAST - 1);
    ck_assert_uint_eq(d.nb, LAST);
    /* a step past the last, never run, in the resumed run only */
    run_of(&ref, 1, LAST);
    run_of(&res, 1, LAST);
    traj_line(&res, LAST + 1);
    dck_resume_traj_check(ref.traj, ref.ntraj, res.traj, res.ntraj, LAST, &d);
    ck_assert_int_eq(d.kind, DCK_RESUME_TRAJ_EXTRA);
    ck_assert_int_eq(d.step, LAST + 1);
    ck_assert_int_eq(d.side, 1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("runs_resume");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, agreeing_runs);
    tcase_add_loop_test(tc, a_parting_is_named_with_its_cause, 0, (int)(sizeof mistakes / sizeof mistakes[0]));
    tcase_add_test(tc, other_starting_weights_are_found_alone);
    tcase_add_test(tc, a_gap_is_not_agreement);
    tcase_add_test(tc, trace_gaps);
    tcase_add_test(tc, a_parting_before_the_stop);
    tcase_add_test(tc, trainer_trajectories);
    suite_add_tcase(s, tc);
    return tu_run(s);
}

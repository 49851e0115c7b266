/* detcheck verify: compare a checkpoint (or a manifest) with a golden
 * manifest. Exit 0 same, 1 different, 2 trouble. */
#include "cli.h"
#include "report/html.h"
#include "report/report.h"
#include "core/core.h"
#include "runs/seal.h"

#include <fnmatch.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char verify_help[] =
    "usage: detcheck verify --golden MANIFEST PATH... [--files] [--json] [--threads N] [-q]\n"
    "       detcheck verify --seal CKPT [--json] [--threads N] [-q]\n"
    "\n"
    "Hashes PATH (a checkpoint in any format detcheck reads, or a manifest) and\n"
    "compares it with the golden manifest, tensor by tensor, by name: dtype,\n"
    "shape and digest must match, no tensor may be missing or extra, recorded\n"
    "values must be equal. Differences are listed in model order and the first\n"
    "one is called out.\n"
    "\n"
    "With --seal, CKPT's files are compared with the checkpoint's own seal\n"
    "(CKPT/detcheck-seal.yaml, or CKPT.detcheck-seal.yaml beside a file; see\n"
    "detcheck-seal(1)): tensors, values, and the files when the seal has their\n"
    "hashes; each difference names the checkpoint file(s) that hold it. No seal,\n"
    "a file that is no seal, or a seal of another step is trouble (exit 2).\n"
    "\n"
    "Options:\n"
    "  -g, --golden FILE  the golden manifest (YAML or JSON)\n"
    "      --seal         compare CKPT with its seal instead of a golden manifest\n"
    "      --files        also compare whole-file hashes and sizes (of every file\n"
    "                     read, and of .bin weights skipped for safetensors)\n"
    "      --json         a JSON report on stdout\n"
    "      --junit FILE   also a JUnit XML report (a test case per tensor) for CI\n"
    "      --markdown FILE  also a Markdown summary ('-': stdout), e.g. into\n"
    "                     $GITHUB_STEP_SUMMARY\n"
    "      --html FILE    also a self-contained HTML page (picture + tables)\n"
    "      --exclude GLOB leave out tensors and values whose names match GLOB\n"
    "                     (fnmatch(3); repeatable)\n"
    "      --ignore-aliases  an extra tensor that shares storage with another of the\n"
    "                     checkpoint (a tied weight torch.save wrote) is no difference\n"
    "      --accept-layout-state  accept the layout state set aside (listed, not\n"
    "                     compared): without it, anything set aside fails\n"
    "      --require-rank-state  compare layout state (per-rank RNG, layout sizes)\n"
    "                     even when the layouts differ; by default it is listed\n"
    "                     and not compared then (see detcheck-formats(7))\n"
    "  -t, --threads N    worker threads for hashing\n"
    "      --iteration N  Megatron-LM checkpoint root: read iter_N instead of the\n"
    "                     latest iteration\n"
    "      --tp-split GLOB=DIM  legacy Megatron-LM trees (merged into the unsplit\n"
    "                     model's tensors): split rule for tensor-parallel ranks\n"
    "                     ('none': replicated); repeatable (see detcheck-formats(7))\n"
    "      --megatron-per-rank  legacy Megatron-LM trees: name tensors by rank\n"
    "                     directory, as saved\n"
    "      --megatron-merge  merge them (the default)\n"
    "  -q, --quiet        print nothing; the exit status says it all\n"
    "  -h, --help         this help\n"
    "\n"
    "Exit status: 0 same, 1 different, 2 trouble.\n";

static void fmt_shape(char *b, size_t n, const dck_manifest_tensor *t) {
    size_t k = (size_t)snprintf(b, n, "[");
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(b + k, n - k, "%s%llu", i ? ", " : "", (unsigned long long)t->shape[i]);
    if (k < n) snprintf(b + k, n - k, "]");
}

static json_t *tensor_json(const dck_manifest_tensor *t, bool *oom) {
    if (!t) return json_null();
    json_t *o = json_object(), *sh = json_array();
    char hex[33];
    dck_digest_to_hex(t->digest, hex);
    cli_jset(o, "dtype", json_string(dck_dtype_name(t->dtype)), oom);
    for (int i = 0; i < t->ndim; i++) cli_jappend(sh, cli_json_u64(t->shape[i]), oom);
    cli_jset(o, "shape", sh, oom);
    cli_jset(o, "digest", json_string(hex), oom);
    return o;
}

static json_t *file_json(const dck_manifest_file *f, bool *oom) {
    if (!f) return json_null();
    char h[33];
    dck_digest_to_hex(f->xxh128, h);
    json_t *o = json_object();
    cli_jset(o, "bytes", cli_json_u64(f->bytes), oom);
    cli_jset(o, "xxh128", json_string(h), oom);
    return o;
}

/* --exclude and --ignore-aliases drop entries of r (in place); an extra
 * tensor that shares storage with another of the checkpoint (which the
 * readers of paths can tell: torch.save files) gets that tensor's name in
 * alias[i] (malloc'd; NULL elsewhere). */
static dck_status filter_entries(dck_cmp_result *r, const cli_shared *sh, const char *const *paths,
                                 size_t npaths, const dck_options *o, char ***alias_out) {
    *alias_out = NULL;
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++) {
        const dck_cmp_entry *e = &r->entries[i];
        bool drop = false;
        for (size_t g = 0; e->kind != DCK_CMP_FILE && g < sh->nexclude && !drop; g++)
            drop = fnmatch(sh->exclude[g], e->name, 0) == 0;
        if (!drop) r->entries[k++] = *e;
    }
    r->n = k;
    size_t extra = 0;
    for (size_t i = 0; i < r->n; i++) extra += r->entries[i].kind == DCK_CMP_EXTRA;
    if (!extra || !paths) return DCK_OK;
    char **alias = calloc(r->n, sizeof *alias);
    long *al = NULL;
    dck_checkpoint *ck = NULL;
    dck_options ro = *o; /* headers only: no progress, no file hashes */
    ro.progress = NULL;
    ro.hash_files = 0;
    ro.notice = NULL;
    dck_status s = alias ? dck_checkpoint_open(paths, npaths, &ro, &ck) : dck_oom(NULL);
    size_t nt = ck ? dck_checkpoint_tensor_count(ck) : 0;
    if (!s && !(al = malloc((nt ? nt : 1) * sizeof *al))) s = dck_oom(NULL);
    if (!s) s = dck_ck_storage_aliases(ck, al);
    k = 0;
    for (size_t i = 0; i < r->n && !s; i++) {
        dck_cmp_entry *e = &r->entries[i];
        long t = e->kind == DCK_CMP_EXTRA ? dck_checkpoint_find(ck, e->name) : -1;
        long a = t >= 0 ? al[t] : -1;
        if (a >= 0 && sh->ignore_aliases) continue;
        r->entries[k] = *e;
        alias[k] = NULL;
        if (a >= 0 && !(alias[k] = dck_strdup(dck_checkpoint_tensor(ck, (size_t)a)->name))) s = dck_oom(NULL);
        k++;
    }
    if (!s) r->n = k;
    free(al);
    dck_checkpoint_free(ck);
    if (s) {
        for (size_t i = 0; alias && i < r->n; i++) free(alias[i]);
        free(alias);
        return s;
    }
    *alias_out = alias;
    return DCK_OK;
}

/* Legacy Megatron-LM trees keep per-rank state (optimizer, RNG) under the
 * rank directory's name (mp_rank_01.optimizer..., detcheck-formats(7)):
 * the length of that first component, or 0. */
static size_t legacy_rank_len(const char *name) {
    if (strncmp(name, "mp_rank_", 8)) return 0;
    const char *c = name + 8;
    for (int part = 0; part < 2; part++) {
        if (part && *c != '_') break;
        if (part) c++;
        if (*c < '0' || *c > '9') return 0;
        while (*c >= '0' && *c <= '9') c++;
    }
    return *c == '.' ? (size_t)(c - name) : 0;
}

/* "mp_rank_00.optimizer (58), mp_rank_01.rng_state (9)": what of the legacy
 * per-rank state was set aside, by rank directory and top-level key, in
 * order of first appearance. The groups are few (ranks x keys): a list. */
static void print_legacy_summary(const dck_cmp_result *aside) {
    struct group {
        const char *name;
        size_t len, count;
    } g[64];
    size_t ng = 0, more = 0;
    for (size_t i = 0; i < aside->n; i++) {
        const char *x = aside->entries[i].name;
        size_t l = legacy_rank_len(x);
        if (!l) continue;
        l += 1 + strcspn(x + l + 1, ".");
        size_t j = 0;
        while (j < ng && !(g[j].len == l && !strncmp(g[j].name, x, l))) j++;
        if (j < ng) g[j].count++;
        else if (ng < sizeof g / sizeof g[0]) g[ng++] = (struct group){x, l, 1};
        else more++;
    }
    for (size_t j = 0; j < ng; j++)
        printf("%s%s (%zu)", j ? ", " : "  per rank directory: ", cli_safen(g[j].name, g[j].len), g[j].count);
    if (more) printf(", %zu more entries", more);
    if (ng) printf("\n");
}

static int cmp_str(const void *x, const void *y) {
    return strcmp(*(const char *const *)x, *(const char *const *)y);
}

/* The golden manifest as compared, for the page's counts of identical
 * tensors by group: less the tensors and values --exclude left out and the
 * layout state set aside, its files only with --files. NULL when out of
 * memory. */
static dck_manifest *compared_golden(const dck_manifest *golden, const cli_shared *sh, const dck_cmp_result *aside,
                                     int files) {
    dck_manifest *m = NULL;
    const char **set = malloc((aside->n ? aside->n : 1) * sizeof *set);
    dck_status s = set ? dck_manifest_create(&m) : dck_oom(NULL);
    for (size_t i = 0; i < aside->n && set; i++) set[i] = aside->entries[i].name;
    if (set && aside->n) qsort(set, aside->n, sizeof *set, cmp_str);
    size_t nt = dck_manifest_tensor_count(golden), nv = dck_manifest_value_count(golden);
    for (size_t i = 0; !s && i < nt + nv; i++) {
        const dck_manifest_tensor *t = i < nt ? dck_manifest_tensor_at(golden, i) : NULL;
        const dck_manifest_value *v = i < nt ? NULL : dck_manifest_value_at(golden, i - nt);
        const char *name = t ? t->name : v->name;
        bool drop = aside->n && bsearch(&name, set, aside->n, sizeof *set, cmp_str);
        for (size_t g = 0; g < sh->nexclude && !drop; g++) drop = fnmatch(sh->exclude[g], name, 0) == 0;
        if (!drop) s = t ? dck_manifest_add_tensor(m, t) : dck_manifest_add_value(m, v->name, v->value);
    }
    for (size_t i = 0; !s && files && i < dck_manifest_file_count(golden); i++)
        s = dck_manifest_add_file(m, dck_manifest_file_at(golden, i));
    free(set);
    if (s) {
        dck_manifest_free(m);
        return NULL;
    }
    return m;
}

/* What verify reports, with --golden or --seal: the manifest compared
 * against (the golden manifest or the seal), its path and its word in the
 * lines ("golden", "seal"); per difference the tensor an extra one shares
 * storage with (alias, --golden) or the checkpoint files that hold it
 * (holders, --seal). */
typedef struct {
    const char *word, *path;
    const dck_manifest *golden, *actual;
    dck_cmp_result *r, *aside;
    const char *layout_why;
    char **alias, **holders; /* per entry of r, or NULL */
    bool seal;
    int files;
} verify_view;

/* The verdict of v on stdout (text or --json) and in the reports asked
 * for: the exit status. */
static int verify_print(const verify_view *v, const cli_shared *sh, cli_report *rep, bool json) {
    dck_status s;
    bool unaccepted = v->aside->n && !sh->accept_layout_state;
    int rc = v->r->n || unaccepted ? DCK_EXIT_DIFFERENT : DCK_EXIT_SAME;
    char hg[33], ha[33];
    dck_digest_to_hex(dck_manifest_root(v->golden), hg);
    dck_digest_to_hex(dck_manifest_root(v->actual), ha);
    const char *first = NULL;
    for (size_t i = 0; i < v->r->n && !first; i++)
        if (v->r->entries[i].kind <= DCK_CMP_EXTRA) first = v->r->entries[i].name;
    if (!first && v->r->n) first = v->r->entries[0].name;
    if (json && !cli_quiet) {
        bool oom = false;
        json_t *doc = json_object(), *diffs = json_array();
        cli_jset(doc, "equal", json_boolean(v->r->n == 0 && !unaccepted), &oom);
        cli_jset(doc, "golden", cli_json_text(v->path), &oom);
        if (v->seal) cli_jset(doc, "seal", cli_json_text(v->path), &oom);
        cli_jset(doc, "root_golden", json_string(hg), &oom);
        cli_jset(doc, "root_actual", json_string(ha), &oom);
        cli_jset(doc, "tensors_golden", cli_json_u64(dck_manifest_tensor_count(v->golden)), &oom);
        cli_jset(doc, "tensors_actual", cli_json_u64(dck_manifest_tensor_count(v->actual)), &oom);
        cli_jset(doc, "tensors_equal", cli_json_u64(v->r->tensors_equal), &oom);
        cli_jset(doc, "first_difference", cli_json_str_or_null(first), &oom);
        if (v->aside->n) {
            json_t *ls = json_object(), *names = json_array();
            cli_jset(ls, "layouts_differ", cli_json_text(v->layout_why), &oom);
            for (size_t i = 0; i < v->aside->n; i++) cli_jappend(names, cli_json_text(v->aside->entries[i].name), &oom);
            cli_jset(ls, "not_compared", names, &oom);
            cli_jset(ls, "accepted", json_boolean(sh->accept_layout_state), &oom);
            cli_jset(doc, "layout_state", ls, &oom);
        }
        for (size_t i = 0; i < v->r->n; i++) {
            const dck_cmp_entry *ce = &v->r->entries[i];
            json_t *e = json_object();
            cli_jset(e, "name", cli_json_text(ce->name), &oom);
            cli_jset(e, "kind", json_string(dck_cmp_kind_name(ce->kind)), &oom);
            if (v->alias && v->alias[i]) cli_jset(e, "alias_of", cli_json_text(v->alias[i]), &oom);
            if (v->seal) cli_jset(e, "files", cli_json_str_or_null(v->holders[i]), &oom);
            if (ce->kind <= DCK_CMP_EXTRA) {
                cli_jset(e, "golden", tensor_json(ce->golden, &oom), &oom);
                cli_jset(e, "actual", tensor_json(ce->actual, &oom), &oom);
            } else if (ce->kind == DCK_CMP_VALUE) {
                cli_jset(e, "golden", ce->golden_value ? cli_json_text(ce->golden_value->value) : json_null(), &oom);
                cli_jset(e, "actual", ce->actual_value ? cli_json_text(ce->actual_value->value) : json_null(), &oom);
            } else if (ce->kind == DCK_CMP_FILE) {
                cli_jset(e, "golden", file_json(ce->golden_file, &oom), &oom);
                cli_jset(e, "actual", file_json(ce->actual_file, &oom), &oom);
            }
            cli_jappend(diffs, e, &oom);
        }
        cli_jset(doc, "differences", diffs, &oom);
        if ((s = cli_json_print(doc, CLI_JSON_INDENT, oom))) rc = cli_fail("verify", s);
    } else if (!cli_quiet) {
        if (!v->r->n && unaccepted) {
            printf("NOT COMPARED: %zu entr%s of layout state against %s (--accept-layout-state accepts them); "
                   "%zu tensors identical\n", v->aside->n, v->aside->n == 1 ? "y" : "ies", cli_safe(v->path), v->r->tensors_equal);
        } else if (!v->r->n) {
            printf("OK: %zu tensors identical to %s (root %s)", v->r->tensors_equal, cli_safe(v->path), ha);
            cli_print_excluded(stdout, sh);
            printf("\n");
        } else {
            printf("DIFFERENT: %zu difference%s against %s; first: %s\n", v->r->n, v->r->n == 1 ? "" : "s",
                   cli_safe(v->path), cli_safe(first));
            for (size_t i = 0; i < v->r->n; i++) {
                const dck_cmp_entry *e = &v->r->entries[i];
                char a[33], b[33], sa[256], sb[256];
                switch (e->kind) {
                case DCK_CMP_DIGEST:
                    dck_digest_to_hex(e->golden->digest, a);
                    dck_digest_to_hex(e->actual->digest, b);
                    printf("  differs  %s: digest %s, %s %s", cli_safe(e->name), b, v->word, a);
                    break;
                case DCK_CMP_DTYPE:
                    printf("  dtype    %s: %s, %s %s", cli_safe(e->name), dck_dtype_name(e->actual->dtype), v->word,
                           dck_dtype_name(e->golden->dtype));
                    break;
                case DCK_CMP_SHAPE:
                    fmt_shape(sa, sizeof sa, e->actual);
                    fmt_shape(sb, sizeof sb, e->golden);
                    printf("  shape    %s: %s, %s %s", cli_safe(e->name), sa, v->word, sb);
                    break;
                case DCK_CMP_MISSING: printf("  missing  %s (in %s, not in checkpoint)", cli_safe(e->name), v->word); break;
                case DCK_CMP_EXTRA:
                    if (v->alias && v->alias[i])
                        printf("  extra    %s (in checkpoint, not in %s; shares storage with %s: a tied "
                               "weight? --ignore-aliases)", cli_safe(e->name), v->word, cli_safe(v->alias[i]));
                    else printf("  extra    %s (in checkpoint, not in %s)", cli_safe(e->name), v->word);
                    break;
                case DCK_CMP_FILE:
                    if (!e->actual_file) printf("  file     %s: missing (in %s, not in checkpoint)", cli_safe(e->name), v->word);
                    else if (!e->golden_file) printf("  file     %s: extra (in checkpoint, not in %s)", cli_safe(e->name), v->word);
                    else {
                        dck_digest_to_hex(e->actual_file->xxh128, a);
                        dck_digest_to_hex(e->golden_file->xxh128, b);
                        printf("  file     %s: %llu bytes xxh128 %s, %s %llu bytes %s", cli_safe(e->name),
                               (unsigned long long)e->actual_file->bytes, a, v->word,
                               (unsigned long long)e->golden_file->bytes, b);
                    }
                    break;
                case DCK_CMP_VALUE:
                    if (!e->actual_value) printf("  value    %s: missing (%s %s)", cli_safe(e->name), v->word, cli_safe(e->golden_value->value));
                    else if (!e->golden_value) printf("  value    %s: extra (%s)", cli_safe(e->name), cli_safe(e->actual_value->value));
                    else printf("  value    %s: %s, %s %s", cli_safe(e->name), cli_safe(e->actual_value->value), v->word, cli_safe(e->golden_value->value));
                    break;
                default: continue;
                }
                /* --seal: where the difference lies on disk */
                if (v->seal && v->holders[i] && e->kind != DCK_CMP_FILE) printf("  (in %s)", cli_safe(v->holders[i]));
                printf("\n");
            }
            printf("%zu of %zu %s tensors identical\n", v->r->tensors_equal, dck_manifest_tensor_count(v->golden), v->word);
        }
        if (v->aside->n && v->layout_why[0]) {
            printf("layouts differ (%s): %zu entr%s of per-rank layout state not compared "
                   "(--require-rank-state compares them%s):\n", cli_safe(v->layout_why), v->aside->n,
                   v->aside->n == 1 ? "y" : "ies", unaccepted ? "" : "; accepted");
        } else if (v->aside->n) {
            printf("writer bookkeeping on one side only: %zu entr%s not compared "
                   "(--require-rank-state compares them%s):\n", v->aside->n, v->aside->n == 1 ? "y" : "ies",
                   unaccepted ? "" : "; accepted");
        }
        if (v->aside->n) {
            for (size_t i = 0; i < v->aside->n && i < 10; i++)
                printf("  layout   %s (%s)\n", cli_safe(v->aside->entries[i].name),
                       v->aside->entries[i].kind == DCK_CMP_MISSING || (v->aside->entries[i].kind == DCK_CMP_VALUE && !v->aside->entries[i].actual_value)
                           ? "in golden only"
                       : v->aside->entries[i].kind == DCK_CMP_EXTRA || (v->aside->entries[i].kind == DCK_CMP_VALUE && !v->aside->entries[i].golden_value)
                           ? "in checkpoint only"
                           : "differs");
            if (v->aside->n > 10) printf("  ... and %zu more (--json lists them all)\n", v->aside->n - 10);
            print_legacy_summary(v->aside);
        }
    }
    if (cli_report_wanted(rep)) {
        cli_report_property(rep, v->word, v->path);
        cli_report_property(rep, "root", ha);
        if (v->r->n)
            cli_report_title(rep, "%zu difference%s against %s; first: %s", v->r->n, v->r->n == 1 ? "" : "s",
                             v->path, first);
        else if (unaccepted)
            cli_report_title(rep, "%zu entries of layout state not compared against %s", v->aside->n, v->path);
        else
            cli_report_title(rep, "%zu tensors identical to %s (root %s)", v->r->tensors_equal, v->path, ha);
        cli_report_exclude(rep, sh->exclude, sh->nexclude);
        if (v->aside->n) {
            char note[640];
            snprintf(note, sizeof note, "%zu entries not compared (layouts differ: %s)%s", v->aside->n, v->layout_why,
                     unaccepted ? "" : "; accepted");
            cli_report_property(rep, "layout_state", note);
        }
        cli_report_aliases(rep, v->alias);
        cli_report_compare(rep, "detcheck.verify", v->golden, v->r, v->word, "checkpoint");
        if (rep->html) {
            dck_manifest *compared = compared_golden(v->golden, sh, v->aside, v->files);
            cli_report_figure(rep, compared ? cli_html_verify_figure(compared, v->r) : NULL);
            dck_manifest_free(compared);
        }
        int e = cli_report_finish(rep, rc);
        if (e) rc = e;
    }
    return rc;
}

/* verify --seal CKPT: the checkpoint's files against its own seal
 * (dck_seal_verify), reported as --golden reports. */
static int verify_seal(int npaths, char **paths, dck_options *o, const cli_shared *sh, cli_report *rep, int files) {
    if (npaths != 1) return cli_usage_error("verify", "--seal takes one checkpoint, not %d paths", npaths);
    /* a seal is the whole checkpoint: nothing of it may be left out */
    if (sh->nexclude || sh->ignore_aliases || sh->accept_layout_state || sh->require_rank_state)
        return cli_usage_error("verify", "--seal compares the whole checkpoint with its seal: no --exclude, "
                                         "--ignore-aliases, --accept-layout-state or --require-rank-state");
    const char *ckpt = paths[0];
    char *seal_path = NULL;
    dck_status s = dck_seal_path(ckpt, &seal_path);
    if (s) return cli_fail("verify", s);
    const char *in[2] = {ckpt, seal_path};
    int bad = cli_report_check(rep, sh->json, in, 2); /* a report never replaces the seal */
    dck_free(seal_path);
    if (bad) return bad;
    o->progress = cli_progress;
    o->notice = cli_notice;
    o->notice_ctx = (void *)"verify";
    dck_seal_result res;
    s = dck_seal_verify(ckpt, o, &res);
    cli_progress_end();
    if (s) return cli_fail("verify", s);
    size_t nfiles = dck_manifest_file_count(res.seal);
    if (files && !nfiles) {
        s = dck_set_error(DCK_ERR_INVALID, "%s has no file hashes (a seal made from memory): --files cannot "
                                           "compare them", res.seal_path);
        dck_seal_result_release(&res);
        return cli_fail("verify", s);
    }
    dck_cmp_result aside = {0};
    verify_view v = {"seal", res.seal_path, res.seal, res.actual, &res.cmp, &aside, "", NULL, res.holders, true,
                     nfiles > 0};
    int rc = verify_print(&v, sh, rep, sh->json);
    dck_seal_result_release(&res);
    return rc;
}

int cmd_verify(int argc, char **argv) {
    static const struct option opts[] = {
        {"golden", required_argument, NULL, 'g'}, {"files", no_argument, NULL, 'F'},
        {"seal", no_argument, NULL, 'S'},
        CLI_REPORT_LONGOPTS, {NULL, 0, NULL, 0}};
    cli_report rep;
    cli_report_init(&rep, "verify");
    const char *golden_path = NULL;
    int files = 0, seal = 0;
    dck_options o;
    dck_options_init(&o);
    o.megatron_merge = 1; /* legacy Megatron trees as one model unless --megatron-per-rank */
    cli_shared sh = {.cmd = "verify", .help_text = verify_help, .read = &o, .threads = &o.threads,
                     .threads_max = 1024, .threads_want = "an integer 1..1024", .filters = true};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = cli_getopt(argc, argv, "g:", opts, &sh)) != -1) {
        switch (c) {
        case CLI_STOP: return sh.exit;
        case 'g': golden_path = optarg; break;
        case 'F': files = 1; break;
        case 'S': seal = 1; break;
        case CLI_OPT_JUNIT:
        case CLI_OPT_MARKDOWN:
        case CLI_OPT_HTML: cli_report_option(&rep, c, optarg); break;
        default:
            return cli_usage_error("verify", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    int json = sh.json;
    if (golden_path && seal)
        return cli_usage_error("verify", "--golden and --seal are two verdicts on one checkpoint: give one");
    if (!golden_path && !seal) return cli_usage_error("verify", "--golden MANIFEST (or --seal) is required");
    if (optind >= argc) return cli_usage_error("verify", "no PATH given");
    if (cli_check_megatron("verify", &o)) return DCK_EXIT_TROUBLE;
    if (seal) return verify_seal(argc - optind, argv + optind, &o, &sh, &rep, files);
    {
        /* the golden is an input too: a report never replaces it */
        const char **in = malloc(sizeof *in * (size_t)(argc - optind + 1));
        if (!in) return cli_fail("verify", dck_oom(NULL));
        in[0] = golden_path;
        for (int i = optind; i < argc; i++) in[i - optind + 1] = argv[i];
        int bad = cli_report_check(&rep, json, in, (size_t)(argc - optind + 1));
        free(in);
        if (bad) return bad;
    }
    dck_manifest *golden = NULL, *actual = NULL;
    dck_status s = dck_manifest_load(golden_path, &golden);
    if (s) return cli_fail("verify", s);
    /* A PATH that is itself a manifest is compared as is; a text file that
     * does not parse as one may still be a checkpoint some reader takes
     * (dck_manifest_sniff), else the manifest's complaint is the useful one. */
    int as_manifest = argc - optind == 1 && dck_manifest_sniff(argv[optind]);
    char manifest_msg[1024] = "";
    if (as_manifest && (s = dck_manifest_load(argv[optind], &actual)))
        snprintf(manifest_msg, sizeof manifest_msg, "%s", dck_last_error());
    int actual_from_manifest = as_manifest && !s;
    if (!as_manifest || s) {
        o.progress = cli_progress;
        o.notice = cli_notice; /* files skipped, safetensors preferred, names namespaced */
        o.notice_ctx = (void *)"verify";
        o.hash_files = files;
        dck_status hs = dck_hash_paths((const char *const *)argv + optind, (size_t)(argc - optind), &o, &actual);
        cli_progress_end();
        if (hs && as_manifest) dck_set_error(s, "%s", manifest_msg);
        else s = hs;
    }
    if (s) {
        dck_manifest_free(golden);
        return cli_fail("verify", s);
    }
    dck_cmp_result r, aside = {0};
    char layout_why[512] = "";
    s = dck_manifest_compare(golden, actual, files, &r);
    char **alias = NULL;
    /* per-rank state of two different layouts: listed, and not compared:
     * no OK over it unless --accept-layout-state */
    if (!s && !sh.require_rank_state)
        s = dck_cmp_set_aside_layout_state(golden, actual, &r, &aside, layout_why, sizeof layout_why);
    if (!s) s = filter_entries(&r, &sh, actual_from_manifest ? NULL : (const char *const *)argv + optind,
                               (size_t)(argc - optind), &o, &alias);
    /* what --exclude leaves out is not set aside either: the user said so */
    size_t kept = 0;
    for (size_t i = 0; i < aside.n; i++) {
        bool drop = false;
        for (size_t g = 0; g < sh.nexclude && !drop; g++) drop = fnmatch(sh.exclude[g], aside.entries[i].name, 0) == 0;
        if (!drop) aside.entries[kept++] = aside.entries[i];
    }
    aside.n = kept;
    if (s) {
        dck_manifest_free(golden);
        dck_manifest_free(actual);
        return cli_fail("verify", s);
    }
    verify_view v = {"golden", golden_path, golden, actual, &r, &aside, layout_why, alias, NULL, false, files};
    int rc = verify_print(&v, &sh, &rep, json);
    for (size_t i = 0; alias && i < r.n; i++) free(alias[i]);
    free(alias);
    dck_cmp_result_release(&r);
    dck_cmp_result_release(&aside);
    dck_manifest_free(golden);
    dck_manifest_free(actual);
    return rc;
}

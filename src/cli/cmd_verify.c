/* detcheck verify: compare a checkpoint (or a manifest) with a golden
 * manifest. Exit 0 same, 1 different, 2 trouble. */
#include "cli.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char verify_help[] =
    "usage: detcheck verify --golden MANIFEST PATH... [--files] [--json] [--threads N] [-q]\n"
    "\n"
    "Hashes PATH (a checkpoint in any format detcheck reads, or a manifest) and\n"
    "compares it with the golden manifest, tensor by tensor, by name: dtype,\n"
    "shape and digest must match, no tensor may be missing or extra, recorded\n"
    "values must be equal. Differences are listed in model order and the first\n"
    "one is called out.\n"
    "\n"
    "Options:\n"
    "  -g, --golden FILE  the golden manifest (YAML or JSON)\n"
    "      --files        also compare whole-file hashes and sizes\n"
    "      --json         a JSON report on stdout\n"
    "  -t, --threads N    worker threads for hashing\n"
    "      --iteration N  Megatron-LM checkpoint root: read iter_N instead of the\n"
    "                     latest iteration\n"
    "      --megatron-merge  legacy Megatron-LM trees: merge the ranks' weights into\n"
    "                     the unsplit model's tensors (see detcheck-formats(7))\n"
    "      --tp-split GLOB=DIM  with --megatron-merge: split rule for tensor-parallel\n"
    "                     ranks ('none': replicated); repeatable\n"
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

static json_t *tensor_json(const dck_manifest_tensor *t) {
    if (!t) return json_null();
    json_t *o = json_object(), *sh = json_array();
    char hex[33];
    dck_digest_to_hex(t->digest, hex);
    json_object_set_new(o, "dtype", json_string(dck_dtype_name(t->dtype)));
    for (int i = 0; i < t->ndim; i++) json_array_append_new(sh, json_integer((json_int_t)t->shape[i]));
    json_object_set_new(o, "shape", sh);
    json_object_set_new(o, "digest", json_string(hex));
    return o;
}

int cmd_verify(int argc, char **argv) {
    static const struct option opts[] = {
        {"golden", required_argument, NULL, 'g'}, {"files", no_argument, NULL, 'F'},
        {"json", no_argument, NULL, 'j'},         {"threads", required_argument, NULL, 't'},
        {"quiet", no_argument, NULL, 'q'},        {"help", no_argument, NULL, 'h'},
        {"iteration", required_argument, NULL, 'I'},
        {"megatron-merge", no_argument, NULL, 'G'}, {"tp-split", required_argument, NULL, 'S'},
        {NULL, 0, NULL, 0}};
    const char *golden_path = NULL;
    int files = 0, json = 0;
    dck_options o;
    dck_options_init(&o);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "g:t:qh", opts, NULL)) != -1) {
        long v;
        switch (c) {
        case 'g': golden_path = optarg; break;
        case 'F': files = 1; break;
        case 'j': json = 1; break;
        case 't':
            if (!cli_parse_long(optarg, 1, 1024, &v))
                return cli_usage_error("verify", "--threads wants an integer 1..1024, not '%s'", optarg);
            o.threads = (int)v;
            break;
        case 'q': cli_quiet = true; break;
        case 'I': /* Megatron checkpoint roots: which iter_N directory */
            if (!cli_parse_long(optarg, 0, 999999999, &v))
                return cli_usage_error("verify", "--iteration wants an integer 0..999999999, not '%s'", optarg);
            o.iteration = v;
            break;
        case 'G': o.megatron_merge = 1; break;
        case 'S':
            if (cli_add_tp_split("verify", &o, optarg)) return DCK_EXIT_TROUBLE;
            break;
        case 'h': fputs(verify_help, stdout); return 0;
        default:
            return cli_usage_error("verify", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (!golden_path) return cli_usage_error("verify", "--golden MANIFEST is required");
    if (optind >= argc) return cli_usage_error("verify", "no PATH given");
    if (cli_check_megatron("verify", &o)) return DCK_EXIT_TROUBLE;
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
    if (!as_manifest || s) {
        o.progress = cli_progress;
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
    dck_cmp_result r;
    s = dck_manifest_compare(golden, actual, files, &r);
    if (s) {
        dck_manifest_free(golden);
        dck_manifest_free(actual);
        return cli_fail("verify", s);
    }
    int rc = r.n ? DCK_EXIT_DIFFERENT : DCK_EXIT_SAME;
    char hg[33], ha[33];
    dck_digest_to_hex(dck_manifest_root(golden), hg);
    dck_digest_to_hex(dck_manifest_root(actual), ha);
    const char *first = NULL;
    for (size_t i = 0; i < r.n && !first; i++)
        if (r.entries[i].kind <= DCK_CMP_EXTRA) first = r.entries[i].name;
    if (!first && r.n) first = r.entries[0].name;
    if (json) {
        json_t *doc = json_object(), *diffs = json_array();
        json_object_set_new(doc, "equal", json_boolean(r.n == 0));
        json_object_set_new(doc, "golden", json_string(golden_path));
        json_object_set_new(doc, "root_golden", json_string(hg));
        json_object_set_new(doc, "root_actual", json_string(ha));
        json_object_set_new(doc, "tensors_golden", json_integer((json_int_t)dck_manifest_tensor_count(golden)));
        json_object_set_new(doc, "tensors_actual", json_integer((json_int_t)dck_manifest_tensor_count(actual)));
        json_object_set_new(doc, "tensors_equal", json_integer((json_int_t)r.tensors_equal));
        json_object_set_new(doc, "first_difference", first ? json_string(first) : json_null());
        for (size_t i = 0; i < r.n; i++) {
            json_t *e = json_object();
            json_object_set_new(e, "name", json_string(r.entries[i].name));
            json_object_set_new(e, "kind", json_string(dck_cmp_kind_name(r.entries[i].kind)));
            const dck_cmp_entry *ce = &r.entries[i];
            if (ce->kind <= DCK_CMP_EXTRA) {
                json_object_set_new(e, "golden", tensor_json(ce->golden));
                json_object_set_new(e, "actual", tensor_json(ce->actual));
            } else if (ce->kind == DCK_CMP_VALUE) {
                json_object_set_new(e, "golden", ce->golden_value ? json_string(ce->golden_value->value) : json_null());
                json_object_set_new(e, "actual", ce->actual_value ? json_string(ce->actual_value->value) : json_null());
            } else if (ce->kind == DCK_CMP_FILE) {
                char h[33];
                json_t *fg = json_null(), *fa = json_null();
                if (ce->golden_file) {
                    dck_digest_to_hex(ce->golden_file->xxh128, h);
                    fg = json_pack("{s:I,s:s}", "bytes", (json_int_t)ce->golden_file->bytes, "xxh128", h);
                }
                if (ce->actual_file) {
                    dck_digest_to_hex(ce->actual_file->xxh128, h);
                    fa = json_pack("{s:I,s:s}", "bytes", (json_int_t)ce->actual_file->bytes, "xxh128", h);
                }
                json_object_set_new(e, "golden", fg);
                json_object_set_new(e, "actual", fa);
            }
            json_array_append_new(diffs, e);
        }
        json_object_set_new(doc, "differences", diffs);
        if (!cli_quiet) {
            char *t = json_dumps(doc, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
            if (t) puts(t);
            free(t);
        }
        json_decref(doc);
    } else if (!cli_quiet) {
        if (!r.n) {
            printf("OK: %zu tensors identical to %s (root %s)\n", r.tensors_equal, golden_path, ha);
        } else {
            printf("DIFFERENT: %zu difference%s against %s; first: %s\n", r.n, r.n == 1 ? "" : "s",
                   golden_path, cli_safe(first));
            for (size_t i = 0; i < r.n; i++) {
                const dck_cmp_entry *e = &r.entries[i];
                char a[33], b[33], sa[256], sb[256];
                switch (e->kind) {
                case DCK_CMP_DIGEST:
                    dck_digest_to_hex(e->golden->digest, a);
                    dck_digest_to_hex(e->actual->digest, b);
                    printf("  differs  %s: digest %s, golden %s\n", cli_safe(e->name), b, a);
                    break;
                case DCK_CMP_DTYPE:
                    printf("  dtype    %s: %s, golden %s\n", cli_safe(e->name), dck_dtype_name(e->actual->dtype),
                           dck_dtype_name(e->golden->dtype));
                    break;
                case DCK_CMP_SHAPE:
                    fmt_shape(sa, sizeof sa, e->actual);
                    fmt_shape(sb, sizeof sb, e->golden);
                    printf("  shape    %s: %s, golden %s\n", cli_safe(e->name), sa, sb);
                    break;
                case DCK_CMP_MISSING: printf("  missing  %s (in golden, not in checkpoint)\n", cli_safe(e->name)); break;
                case DCK_CMP_EXTRA: printf("  extra    %s (in checkpoint, not in golden)\n", cli_safe(e->name)); break;
                case DCK_CMP_FILE:
                    if (!e->actual_file) printf("  file     %s: missing (in golden, not in checkpoint)\n", cli_safe(e->name));
                    else if (!e->golden_file) printf("  file     %s: extra (in checkpoint, not in golden)\n", cli_safe(e->name));
                    else {
                        dck_digest_to_hex(e->actual_file->xxh128, a);
                        dck_digest_to_hex(e->golden_file->xxh128, b);
                        printf("  file     %s: %llu bytes xxh128 %s, golden %llu bytes %s\n", cli_safe(e->name),
                               (unsigned long long)e->actual_file->bytes, a,
                               (unsigned long long)e->golden_file->bytes, b);
                    }
                    break;
                case DCK_CMP_VALUE:
                    if (!e->actual_value) printf("  value    %s: missing (golden %s)\n", cli_safe(e->name), cli_safe(e->golden_value->value));
                    else if (!e->golden_value) printf("  value    %s: extra (%s)\n", cli_safe(e->name), cli_safe(e->actual_value->value));
                    else printf("  value    %s: %s, golden %s\n", cli_safe(e->name), cli_safe(e->actual_value->value), cli_safe(e->golden_value->value));
                    break;
                default: break;
                }
            }
            printf("%zu of %zu golden tensors identical\n", r.tensors_equal, dck_manifest_tensor_count(golden));
        }
    }
    dck_cmp_result_release(&r);
    dck_manifest_free(golden);
    dck_manifest_free(actual);
    return rc;
}

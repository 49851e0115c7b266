/* What detcheck doctor prints (detcheck-doctor(1)): per row of
 * dck_doctor_probe's result, "NAME: STATE ..." then its facts and why,
 * indented, one line each; and the same as --json. Paths and the loader's
 * messages are data (a folder's name may hold anything): quoted for the
 * terminal, as text in JSON. */
#include "report/doctor.h"
#include "report/text.h"

#include <stdlib.h>
#include <string.h>

/* Each line of lines ('\n' between them), indented. */
static void print_lines(FILE *out, const char *lines) {
    for (const char *p = lines; p && *p;) {
        size_t n = strcspn(p, "\n");
        fprintf(out, "    %s\n", cli_safen(p, n));
        p += n + (p[n] == '\n');
    }
}

void cli_doctor_print(FILE *out, const dck_doctor_result *r) {
    for (size_t i = 0; i < r->n; i++) {
        const dck_doctor_row *w = &r->rows[i];
        fprintf(out, "%s: ", w->name);
        switch (w->state) {
        case DCK_DOCTOR_INFO:
            fprintf(out, "%s", w->version ? cli_safe(w->version) : "");
            if (w->from) fprintf(out, " (%s)", cli_safe(w->from));
            break;
        case DCK_DOCTOR_FOUND:
        case DCK_DOCTOR_UNUSABLE:
            fprintf(out, "%s", dck_doctor_state_name(w->state));
            if (w->version) fprintf(out, " %s", cli_safe(w->version));
            if (w->path) fprintf(out, ": %s", cli_safe(w->path));
            if (w->from) fprintf(out, " (%s)", cli_safe(w->from));
            break;
        case DCK_DOCTOR_ABSENT: fprintf(out, "absent; looked for in:"); break;
        case DCK_DOCTOR_NOT_BUILT: fprintf(out, "not built"); break;
        }
        fputc('\n', out);
        print_lines(out, w->detail);
        print_lines(out, w->why);
    }
}

static json_t *lines_json(const char *lines, bool *oom) {
    json_t *a = json_array();
    for (const char *p = lines; p && *p;) {
        size_t n = strcspn(p, "\n");
        char *line = dck_strndup(p, n);
        if (!line) *oom = true;
        else cli_jappend(a, cli_json_text(line), oom);
        free(line);
        p += n + (p[n] == '\n');
    }
    return a;
}

json_t *cli_doctor_json(const dck_doctor_result *r, bool *oom) {
    json_t *doc = json_object(), *rows = json_array();
    for (size_t i = 0; i < r->n; i++) {
        const dck_doctor_row *w = &r->rows[i];
        json_t *o = json_object();
        cli_jset(o, "key", json_string(w->key), oom);
        cli_jset(o, "name", json_string(w->name), oom);
        cli_jset(o, "state", json_string(dck_doctor_state_name(w->state)), oom);
        cli_jset(o, "version", cli_json_str_or_null(w->version), oom);
        cli_jset(o, "path", cli_json_str_or_null(w->path), oom);
        cli_jset(o, "from", cli_json_str_or_null(w->from), oom);
        cli_jset(o, "detail", lines_json(w->detail, oom), oom);
        cli_jset(o, "why", lines_json(w->why, oom), oom);
        cli_jappend(rows, o, oom);
    }
    cli_jset(doc, "rows", rows, oom);
    return doc;
}

/* What detcheck latest says of dck_latest_find's result (man
 * detcheck-latest(1)): the counts of the line that says none qualifies,
 * and the --json document. The lines of the skipped candidates are the
 * library's reasons, printed by the command as each is judged. */
#include "report/latest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_latest_counts(const dck_latest_result *r, char *buf, size_t n) {
    size_t count[DCK_LATEST_UNREADABLE + 1] = {0}, judged = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->entries[i].state != DCK_LATEST_OLDER && r->entries[i].state <= DCK_LATEST_UNREADABLE) {
            count[r->entries[i].state]++;
            judged++;
        }
    /* at most ten short parts: no cut in a buffer of CLI_LATEST_COUNTS_MAX */
    size_t k = (size_t)snprintf(buf, n, "%zu candidate%s", judged, judged == 1 ? "" : "s");
    const char *sep = ": ";
    for (int s = DCK_LATEST_CHOSEN; s <= DCK_LATEST_UNREADABLE && k < n; s++)
        if (count[s]) {
            k += (size_t)snprintf(buf + k, n - k, "%s%zu %s", sep, count[s], dck_latest_state_name((dck_latest_state)s));
            sep = ", ";
        }
}

static json_t *entry_json(const dck_latest_entry *e, bool *oom) {
    json_t *o = json_object();
    cli_jset(o, "path", cli_json_text(e->path), oom);
    cli_jset(o, "name", cli_json_text(e->name), oom);
    cli_jset(o, "step", json_integer(e->step), oom);
    if (e->state == DCK_LATEST_CHOSEN) return o;
    cli_jset(o, "reason", json_string(dck_latest_state_name(e->state)), oom);
    cli_jset(o, "message", cli_json_str_or_null(e->why), oom);
    if (e->state == DCK_LATEST_CORRUPT) {
        cli_jset(o, "differences", cli_json_u64(e->differences), oom);
        cli_jset(o, "first", cli_json_str_or_null(e->first), oom);
        cli_jset(o, "files", cli_json_str_or_null(e->first_files), oom);
    }
    return o;
}

json_t *cli_latest_json(const char *dir, bool verify, const dck_latest_result *r, bool *oom) {
    json_t *doc = json_object(), *skipped = json_array(), *others = json_array();
    size_t older = 0;
    cli_jset(doc, "dir", cli_json_text(dir), oom);
    cli_jset(doc, "verify", json_boolean(verify), oom);
    cli_jset(doc, "chosen", r->chosen >= 0 ? entry_json(&r->entries[r->chosen], oom) : json_null(), oom);
    for (size_t i = 0; i < r->n; i++) {
        if (r->entries[i].state == DCK_LATEST_OLDER) older++;
        else if (r->entries[i].state != DCK_LATEST_CHOSEN) cli_jappend(skipped, entry_json(&r->entries[i], oom), oom);
    }
    cli_jset(doc, "skipped", skipped, oom);
    cli_jset(doc, "older_not_judged", cli_json_u64(older), oom);
    for (size_t i = 0; i < r->nothers; i++) cli_jappend(others, cli_json_text(r->others[i]), oom);
    cli_jset(doc, "not_candidates", others, oom);
    return doc;
}

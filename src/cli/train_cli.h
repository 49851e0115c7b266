/* Shared by the train, resume-check and bisect commands. */
#ifndef DCK_TRAIN_CLI_H
#define DCK_TRAIN_CLI_H
#include "cli.h"
#include "train/train.h"

/* Parses train flags (--name value, --name=value) from argv[1..]. Other
 * arguments go to extra(ctx, arg, next, &used): 1 consumed (plus `used`
 * following arguments), 0 unknown, -1 error already reported. Returns 0 or
 * an exit code. */
int train_parse_args(const char *cmd, int argc, char **argv, dck_train_config *c,
                     int (*extra)(void *, const char *, const char *, int *), void *ectx);

/* The train options a command that passes the others on (canary,
 * resume-check) does not take, in one table per command, NULL-terminated:
 * train_parse_args_except refuses each by name with `why`, and
 * train_print_refused lists them in the command's --help on the line
 * "Train options not taken here: --out ...", from which ci/completion.sh
 * leaves them out of the command's completions. */
typedef struct {
    const char *name; /* without the dashes */
    const char *why;
} train_refused;
int train_parse_args_except(const char *cmd, int argc, char **argv, dck_train_config *c,
                            const train_refused *refused,
                            int (*extra)(void *, const char *, const char *, int *), void *ectx);
void train_print_refused(FILE *out, const train_refused *refused);
#endif

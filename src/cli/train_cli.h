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
#endif

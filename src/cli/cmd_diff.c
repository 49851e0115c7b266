/* detcheck diff: placeholder until its issue lands. */
#include "cli.h"

int cmd_diff(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("diff", "not implemented yet");
    return DCK_EXIT_TROUBLE;
}

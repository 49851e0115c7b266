/* detcheck bisect: placeholder until its issue lands. */
#include "cli.h"

int cmd_bisect(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("bisect", "not implemented yet");
    return DCK_EXIT_TROUBLE;
}

/* detcheck train: placeholder until its issue lands. */
#include "cli.h"

int cmd_train(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("train", "not implemented yet");
    return DCK_EXIT_TROUBLE;
}

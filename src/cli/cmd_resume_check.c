/* detcheck resume-check: placeholder until its issue lands. */
#include "cli.h"

int cmd_resume_check(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("resume-check", "not implemented yet");
    return DCK_EXIT_TROUBLE;
}

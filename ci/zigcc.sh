#!/bin/sh
# The portable build's C compiler (make PORTABLE=1): zig cc, clang with
# glibc 2.28's headers and symbol versions, so what it links runs on every
# glibc >= 2.28 (RHEL 8 and later). $DCK_ZIG is the zig binary, resolved
# once by the Makefile (from `sh ci/venv.sh wheel`); without it each call
# asks ci/venv.sh (slower, for use by hand).
if [ -z "${DCK_ZIG:-}" ]; then
    py=$(sh "$(dirname "$0")/venv.sh" wheel) || exit 2
    DCK_ZIG=$("$py" -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))') || exit 2
fi
exec "$DCK_ZIG" cc -target x86_64-linux-gnu.2.28 "$@"

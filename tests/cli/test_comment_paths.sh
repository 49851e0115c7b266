#!/bin/sh
# The check of the paths comments name (ci/comment_paths.py): clean on the
# tree; failing on a planted comment that names a file that does not exist
# (by its path from the top, and by its layer); silent on a word with a
# slash that is no path, on a placeholder and on a string literal.
. "$DCK_TOP/tests/cli/lib.sh"
command -v python3 > /dev/null || fail "python3 is needed for the comment path check"

expect_exit 0 python3 "$DCK_TOP/ci/comment_paths.py" "$DCK_TOP"
expect_grep '^comment paths: ok$' out.txt

# a copy of src/ beside the tree's other folders
mkdir top
cp -R "$DCK_TOP/src" top/src
for d in include cuda tests; do ln -s "$DCK_TOP/$d" "top/$d"; done
expect_exit 0 python3 "$DCK_TOP/ci/comment_paths.py" top

cat >> top/src/common/util.c << 'C'
/* --device cuda/twin; src/LAYER/cmd_NAME.c; tests/cli/test_*.sh; see
 * src/gpu/gpu_xxh3.h, runs/trajectory.c and tests/cli/lib.sh. */
static const char *const planted_literal = "src/not_there.c";
C
expect_exit 0 python3 "$DCK_TOP/ci/comment_paths.py" top

printf '/* the hash code (src/gpu_xxh3.h) */\n' >> top/src/common/util.c
printf '/* the trajectory reader,\n * train/train_traj.c. */\n' >> top/src/core/digest.c
printf '/* tests/cli/test_gone.sh */\n' >> top/src/common/util.c
expect_exit 1 python3 "$DCK_TOP/ci/comment_paths.py" top
# FILE:LINE of each, past the lines the tree's file has
u=$(wc -l < "$DCK_TOP/src/common/util.c")
d=$(wc -l < "$DCK_TOP/src/core/digest.c")
expect_grep "^src/common/util.c:$((u + 4)): src/gpu_xxh3.h does not exist$" out.txt
expect_grep "^src/core/digest.c:$((d + 2)): src/train/train_traj.c does not exist$" out.txt
expect_grep "^src/common/util.c:$((u + 5)): tests/cli/test_gone.sh does not exist$" out.txt
expect_grep '^comment paths: 3 stale$' out.txt
done_ok

#!/bin/sh
# The layer check (ci/layers.py) over this build's objects and sources:
# clean on the tree, and failing on a planted upward call and on a planted
# cycle between two files of one layer.
. "$DCK_TOP/tests/cli/lib.sh"
B="$DCK_TOP/${BUILD:-build}"
command -v python3 >/dev/null || fail "python3 is needed for the layer check"
command -v nm >/dev/null || fail "nm is needed for the layer check"

expect_exit 0 python3 "$DCK_TOP/ci/layers.py" "$B" "$DCK_TOP/src"
expect_grep '^layers: .* ok$' out.txt

# A copy of the tree's objects with one planted file in common/ that calls
# up into diff/: the check names it and fails.
mkdir -p planted/src/common planted/src/core src
cp -R "$B/src/." planted/src/
cat > up.c <<'C'
int dck_diff_paths(void);
int planted_upward(void) { return dck_diff_paths(); }
C
cc -c up.c -o planted/src/common/planted_up.o
expect_exit 1 python3 "$DCK_TOP/ci/layers.py" --all-objects planted "$DCK_TOP/src"
expect_grep 'src/common/planted_up.o (layer common) uses src/diff/diff.o (layer diff, above it): dck_diff_paths' out.txt
rm planted/src/common/planted_up.o

# report/ lies below cli/: a report that calls the command line (to print
# a message) is an upward call, at the symbol and at the include level.
mkdir -p planted/src/report
cat > rep.c <<'C'
int cli_fail(const char *cmd, int s);
int planted_report(void) { return cli_fail("report", 2); }
C
cc -c rep.c -o planted/src/report/planted_rep.o
expect_exit 1 python3 "$DCK_TOP/ci/layers.py" --all-objects planted "$DCK_TOP/src"
expect_grep 'src/report/planted_rep.o (layer report) uses src/cli/cli_util.o (layer cli, above it): cli_fail' out.txt
rm planted/src/report/planted_rep.o

# Two files of one layer calling each other: a cycle.
cat > a.c <<'C'
int planted_b(void);
int planted_a(void) { return planted_b(); }
C
cat > b.c <<'C'
int planted_a(void);
int planted_b(void) { return planted_a(); }
C
cc -c a.c -o planted/src/core/planted_a.o
cc -c b.c -o planted/src/core/planted_b.o
expect_exit 1 python3 "$DCK_TOP/ci/layers.py" --all-objects planted "$DCK_TOP/src"
expect_grep 'cycle in layer core: .*planted_a.o -> .*planted_b.o' out.txt
rm planted/src/core/planted_a.o planted/src/core/planted_b.o

# An #include of a higher layer's header is caught at the source level too.
mkdir -p tree/src
cp -R "$DCK_TOP/src/." tree/src/
printf '#include "train/train.h"\n' >> tree/src/core/digest.c
expect_exit 1 python3 "$DCK_TOP/ci/layers.py" "$B" tree/src
expect_grep 'includes: src/core/digest.c (layer core) uses src/train/train.h (layer train, above it)' out.txt
cp "$DCK_TOP/src/core/digest.c" tree/src/core/digest.c
printf '#include "cli/cli.h"\n' >> tree/src/report/json.c
expect_exit 1 python3 "$DCK_TOP/ci/layers.py" "$B" tree/src
expect_grep 'includes: src/report/json.c (layer report) uses src/cli/cli.h (layer cli, above it)' out.txt
done_ok

# CLI: the same bits from any build. Builds the library and the CLI with gcc
# and clang, at -O2 and at -O3 -march=x86-64-v3 (into temporary build
# folders; CUDA=0 MPI=0 to stay lean: neither touches the CPU arithmetic),
# and checks that each build gives the bits of the binary under test: the
# trajectory of a short `detcheck train` run (fp32 and bf16; the fp32 root
# at step 20 is the golden one), the checkpoint manifests and digests, and a
# `detcheck diff --json` report between two checkpoints (max abs/rel, ULPs,
# rel_l2). Also checks that the fast-math flags are refused. An absent
# compiler, or a CPU without AVX2 for -march=x86-64-v3, skips that part
# visibly. Takes about a minute. DCK_SKIP_BUILD_MATRIX=why skips it all
# (.ci/run: the matrix runs once, in the first stage).
. "$DCK_TOP/tests/cli/lib.sh"
export SOURCE_DATE_EPOCH=1700000000
GOLDEN_ROOT_20=45af94125d8a41f86ad967d632a44d99

[ -z "${DCK_SKIP_BUILD_MATRIX:-}" ] || skip "$DCK_SKIP_BUILD_MATRIX"
command -v make > /dev/null || skip "no make here"
# a nested make of our own: not the jobserver of a `make check` above us
unset MAKEFLAGS MFLAGS MAKELEVEL

# run_all DIR BIN: the runs whose outputs must be the same bits everywhere
run_all() {
    mkdir -p "$1"
    (
        cd "$1"
        "$2" train --steps 20 --ckpt-every 10 --out t -q > /dev/null
        "$2" train --steps 4 --precision bf16 --out tb -q > /dev/null
        "$2" hash -o h10.yaml t/step_00000010
        "$2" hash --json -o h20.json t/step_00000020
        set +e
        "$2" diff --json t/step_00000010 t/step_00000020 > diff.json
        rc=$?
        set -e
        [ "$rc" -eq 1 ] || { echo "diff exit $rc, wanted 1"; exit 1; }
    ) 2> "$1.err" || { cat "$1.err"; fail "$2: the runs failed"; }
    ok
}
OUTPUTS="t/trajectory.jsonl tb/trajectory.jsonl t/step_00000010/manifest.json
t/step_00000020/manifest.json t/step_00000020/rank_00000_of_00001.safetensors h10.yaml h20.json
diff.json"

run_all ref "$DETCHECK"
grep -q "\"step\":20,.*\"root\":\"$GOLDEN_ROOT_20\"" ref/t/trajectory.jsonl ||
    { tail -n 1 ref/t/trajectory.jsonl; fail "root at step 20 is not the golden $GOLDEN_ROOT_20"; }
ok
grep -q '"max_ulp"' ref/diff.json || fail "diff report without figures"
ok

has_v3() { # x86-64-v3: AVX2, FMA, BMI1/2, F16C, MOVBE, LZCNT
    for f in avx2 fma bmi1 bmi2 f16c movbe abm; do
        grep -qw "$f" /proc/cpuinfo 2> /dev/null || return 1
    done
}

# Is the binary under test itself a plain gcc -O2 build (CFLAGS=-O2, the
# default; no sanitizer)? Then it stands for that build of the matrix.
ref_flags=$(cut -d'|' -f1 "$(dirname "$DETCHECK")/flags.txt" 2> /dev/null || true)
ref_cc=$(echo "$ref_flags" | awk '{print $1}')
ref_is_gcc_o2=0
if [ "$(echo "$ref_flags" | awk '{print $2, $3}')" = "-O2 -std=c11" ] &&
    ! echo "$ref_flags" | grep -q -- "-fsanitize" &&
    "$ref_cc" --version 2> /dev/null | grep -q "Free Software Foundation"; then
    ref_is_gcc_o2=1
fi

built=0
for spec in "gcc|-O2" "clang|-O2" "gcc|-O3 -march=x86-64-v3" "clang|-O3 -march=x86-64-v3"; do
    cc=${spec%%|*}
    flags=${spec#*|}
    name="$cc $flags"
    if ! command -v "$cc" > /dev/null; then
        skip_part "$name: no $cc here"
        continue
    fi
    case $flags in *x86-64-v3*)
        if ! has_v3; then
            skip_part "$name: this CPU lacks x86-64-v3 (AVX2, FMA, BMI2...): the build could not run"
            continue
        fi ;;
    esac
    if [ "$name" = "gcc -O2" ] && [ "$ref_is_gcc_o2" -eq 1 ]; then
        echo "gcc -O2: the binary under test is that build ($ref_cc -O2)"
        continue
    fi
    b="$TESTTMP/b-$built"
    built=$((built + 1))
    # SANITIZE=0: these are packagers' builds, whatever build runs the test
    if ! make -C "$DCK_TOP" -j2 BUILD="$b" CC="$cc" CFLAGS="$flags" SANITIZE=0 CUDA=0 MPI=0 "$b/detcheck" \
        > "build-$built.log" 2>&1; then
        grep -E "error:|warning:|Error" "build-$built.log" | head -n 20
        fail "$name: the build failed (warnings are errors: packagers' flags must build cleanly)"
    fi
    ok
    run_all "r-$built" "$b/detcheck"
    for f in $OUTPUTS; do
        cmp -s "ref/$f" "r-$built/$f" ||
            { diff "ref/$f" "r-$built/$f" | head -n 10; fail "$name: $f differs from the binary under test"; }
        ok
    done
    rm -rf "$b" # objects: ~10 MB a build
done

# -ffast-math and its parts are refused: by the Makefile by name, and by the
# compiler's own macros (common.h) whatever the build system
set +e
make -C "$DCK_TOP" BUILD="$TESTTMP/b-fast" CFLAGS="-O2 -ffast-math" SANITIZE=0 CUDA=0 MPI=0 \
    "$TESTTMP/b-fast/detcheck" > fast.log 2>&1
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "a -ffast-math build was not refused"
expect_grep "same bits from any build: remove -ffast-math" fast.log
[ ! -e "$TESTTMP/b-fast/detcheck" ] || fail "a -ffast-math build produced a binary"
ok
# the device side: nvcc's fast-math flags are refused by name (the check
# runs when the Makefile is read: no nvcc needed), and --fmad=false stays
# in NVCCFLAGS whatever the command line gives
for flag in --use_fast_math -use_fast_math -ftz=true --prec-div=false --prec-sqrt=false \
    --fmad=true; do
    set +e
    make -C "$DCK_TOP" BUILD="$TESTTMP/b-nvfast" NVCCFLAGS="-O2 $flag" SANITIZE=0 CUDA=0 MPI=0 \
        "$TESTTMP/b-nvfast/detcheck" > nvfast.log 2>&1
    rc=$?
    set -e
    [ "$rc" -ne 0 ] || fail "NVCCFLAGS with $flag was not refused"
    expect_grep "same bits from any build: remove $flag from NVCC/NVCCFLAGS" nvfast.log
    [ ! -e "$TESTTMP/b-nvfast/detcheck" ] || fail "an NVCCFLAGS=$flag build produced a binary"
done
ok
for nvflags in "-O3" "-O3 -std=c++17" ""; do
    make -s -C "$DCK_TOP" BUILD="$TESTTMP/b-nvfast" NVCCFLAGS="$nvflags" CUDA=0 MPI=0 \
        --eval='dck-show-nvccflags: ; @echo "NVCCFLAGS=$(NVCCFLAGS)"' dck-show-nvccflags \
        > nvflags.log 2>&1 || { cat nvflags.log; fail "make NVCCFLAGS='$nvflags' failed"; }
    expect_grep "NVCCFLAGS=.*--fmad=false" nvflags.log
done
ok
for cc in gcc clang; do
    command -v "$cc" > /dev/null || continue
    for flag in -ffast-math -ffinite-math-only; do
        printf '#include "common/common.h"\n' > refuse.c
        if "$cc" -std=c11 "$flag" -I"$DCK_TOP/include" -I"$DCK_TOP/src" -fsyntax-only refuse.c \
            > refuse.log 2>&1; then
            fail "$cc $flag: common.h did not refuse it"
        fi
        expect_grep "detcheck must not be built with" refuse.log
    done
done
done_ok

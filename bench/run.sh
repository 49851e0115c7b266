#!/bin/sh
# make bench: runs every bench/bench_NAME.sh (each measures detcheck against a
# named peer in the same run, alternating the two; helpers in bench/lib.sh),
# then prints one summary table of every row and its goal.
#
#   sh bench/run.sh [BUILD]
#   BENCH_ONLY="tensors files"   only these scripts (names or bench_NAME.sh;
#                                space- or comma-separated)
#   BENCH_QUICK=1                small sizes, 3 rounds: a smoke test
# (see bench/lib.sh for the rest: BENCH_REPS, BENCH_METRIC, BENCH_TIMEOUT, ...)
#
# Exit status: 0 every goal met, 1 a goal not met (or a run timed out),
# 2 a benchmark could not run (its message says why). Skipped rows say why
# and do not change the status.
BUILD=${1:-${BUILD:-build}}
top=$(cd "$(dirname "$0")/.." && pwd)
export DETCHECK="${DETCHECK:-$top/$BUILD/detcheck}" BUILD DCK_TOP="$top"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
summary=$(mktemp "${TMPDIR:-/tmp}/dck-bench-summary.XXXXXX") || exit 2
trap 'rm -f "$summary"' EXIT
trap 'exit 2' INT TERM HUP
export BENCH_SUMMARY="$summary"
# numpy for the peers that need it (row 5's numpy script, llm.c's checkpoint
# generator): python3 when it has it, else a venv cached outside the clone
BENCH_PYTHON=$(sh "$top/ci/venv.sh" bench) || BENCH_PYTHON=python3
export BENCH_PYTHON

only=$(echo "${BENCH_ONLY:-}" | tr ',' ' ')
scripts=
if [ -n "$only" ]; then
    for n in $only; do
        n=${n#bench_}
        n=${n%.sh}
        if [ ! -f "$top/bench/bench_$n.sh" ]; then
            echo "bench: no bench/bench_$n.sh (BENCH_ONLY=$BENCH_ONLY); there are:" \
                $(cd "$top/bench" && ls bench_*.sh | sed 's/^bench_//; s/\.sh$//') >&2
            exit 2
        fi
        scripts="$scripts $top/bench/bench_$n.sh"
    done
else
    # the README Performance rows in their order (1-2, 3, 4 7 8, 5, 6, 9), then the others
    order="tensors files hash diff startup llmc pt train gpu"
    for n in $order; do
        [ -f "$top/bench/bench_$n.sh" ] && scripts="$scripts $top/bench/bench_$n.sh"
    done
    for b in "$top"/bench/bench_*.sh; do
        case " $order " in *" $(basename "$b" .sh | sed 's/^bench_//') "*) ;; *) scripts="$scripts $b" ;; esac
    done
fi

echo "$("$DETCHECK" --version 2> /dev/null | head -n 1) ($DETCHECK)"
echo "$(date -u +%Y-%m-%dT%H:%MZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg 2> /dev/null)$([ "${BENCH_QUICK:-0}" != 0 ] && echo ', QUICK mode: small sizes, figures mean nothing')"
echo
rc=0
start=$(date +%s)
for b in $scripts; do
    name=$(basename "$b" .sh)
    echo "== ${name#bench_}"
    t0=$(date +%s)
    sh "$b"
    r=$?
    [ "$r" -gt 2 ] && r=2
    [ "$r" -gt "$rc" ] && rc=$r
    case $r in
    0) s="" ;;
    1) s=", a goal NOT met" ;;
    *) s=", FAILED (exit $r)" ;;
    esac
    echo "   ($(($(date +%s) - t0)) s$s)"
    echo
done

echo "== summary ($(($(date +%s) - start)) s): ratio = detcheck / peer of the medians, in the time named"
awk -F '\t' '
    BEGIN { wi = 2; wa = 8; wb = 4; wr = 6 }
    {
        id[NR] = $1; t[NR] = $2; a[NR] = $3; b[NR] = $4; r[NR] = $5; g[NR] = $6; s[NR] = $7
        if (length(t[NR]) > 56) t[NR] = substr(t[NR], 1, 53) "..."
        if (length(r[NR]) > 56) r[NR] = substr(r[NR], 1, 53) "..."
        if (length($1) > wi) wi = length($1); if (length($3) > wa) wa = length($3)
        if (length($4) > wb) wb = length($4); if (length(r[NR]) > wr) wr = length(r[NR])
    }
    END {
        printf "%-*s  %-56s  %-*s  %-*s  %-*s  %-16s  %s\n", wi, "id", "case", wa, "detcheck", wb, "peer", wr, "result", "goal", ""
        for (i = 1; i <= NR; i++)
            printf "%-*s  %-56s  %-*s  %-*s  %-*s  %-16s  %s\n", wi, id[i], t[i], wa, a[i], wb, b[i], wr, r[i], g[i], s[i]
    }' "$summary"
exit $rc

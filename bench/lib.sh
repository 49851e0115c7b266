# bench/lib.sh: sourced by every bench/bench_NAME.sh (POSIX sh).
#
# A row measures detcheck (side A) against its peer (side B) in the same run:
# one untimed warm-up run of each (page cache, lazy binding; its output is
# kept for checks), then N rounds that alternate the order (A B, B A, A B,
# ...) so that load from elsewhere falls on both alike. Each run is timed by
# bench/measure.c (wall time, user+sys CPU time, peak RSS, exit status, with
# a timeout); a row prints the medians of each side, the largest peak RSS,
# and the ratio A/B in the time the row names (CPU or wall) next to its goal,
# "met" or "NOT met".
#
#   bench_init NAME                      at the top of a script
#   bench_size FULL QUICK                FULL, or QUICK under BENCH_QUICK=1
#   A_LABEL= A_CMD= [A_RC=0] B_LABEL= B_CMD= [B_RC=0]
#   bench_pair ID N                      run the row (returns 1 if it failed)
#   bench_ratio ID TITLE METRIC GOAL     print A/B (METRIC cpu|wall) vs <= GOAL
#   bench_single ID N                    side A alone (no peer), then
#   bench_figure ID TITLE                its medians as a figure (no goal)
#   bench_per_unit, bench_scale          per-unit costs and growth (below)
#   bench_skip ID TITLE WHY              a row that cannot run here, and why
#   bench_finish                         exit: 0 met, 1 a goal not met, 2 trouble
#
# Environment:
#   BENCH_QUICK=1       small sizes and 3 rounds: a smoke test (~1 minute a script)
#   BENCH_REPS=N        rounds per row (overrides each row's default)
#   BENCH_METRIC=cpu|wall  the time every ratio uses (default: each row's own)
#   BENCH_TIMEOUT=S     a run taking longer is killed and the row NOT met (300; quick 60)
#   BENCH_ROW_BUDGET=S  fewer rounds (at least 1) when N rounds would take longer
#                       than this, judged by the warm-up (120; quick 20)
#   BENCH_TIMER=c|python|gnu  the timer (default: c, else python, else GNU time)
#   BENCH_SUMMARY=FILE  one tab-separated line per row is appended here (run.sh)
#   BENCH_KEEP=1        keep the work directory (its path is printed)
#   DETCHECK, BUILD, DCK_TOP  as set by run.sh; TMPDIR for the work directory

bench_init() {
    BENCH_NAME=$1
    top=${DCK_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
    BUILD=${BUILD:-build}
    D=${DETCHECK:-$top/$BUILD/detcheck}
    QUICK=${BENCH_QUICK:-0}
    [ "$QUICK" = 0 ] || QUICK=1
    bench_status=0
    BENCH_TIMEOUT=${BENCH_TIMEOUT:-$(bench_size 300 60)}
    BENCH_ROW_BUDGET=${BENCH_ROW_BUDGET:-$(bench_size 120 20)}
    export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1}
    export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
    work=$(mktemp -d "${TMPDIR:-/tmp}/dck-bench-$BENCH_NAME.XXXXXX") || exit 2
    if [ "${BENCH_KEEP:-0}" = 1 ]; then
        echo "work directory (kept): $work"
    else
        trap 'rm -rf "$work"' EXIT
    fi
    trap 'exit 2' INT TERM HUP
    if [ ! -x "$D" ]; then
        echo "$BENCH_NAME: no detcheck binary at $D (make BUILD=$BUILD all)" >&2
        exit 2
    fi
    bench_timer_setup
    mkdir -p "$work/res"
}

# bench_torch_python: PY, a python3 with torch (DCK_TORCH_PYTHON, else
# ci/venv.sh torch); 1 when there is none.
bench_torch_python() {
    PY=${DCK_TORCH_PYTHON:-}
    [ -n "$PY" ] || PY=$(sh "$top/ci/venv.sh" torch 2> "$work/venv.err") || PY=
    [ -n "$PY" ] && "$PY" -c "import torch, torch.distributed" 2> /dev/null
}

# bench_py_cost ID TITLE SCRIPT ARGS...: runs a Python cost benchmark
# (bench/SCRIPT with the package from python/src and this build's library,
# under the timeout), prints its output indented and sets out. Its exit 3
# is its own goal missed (the row's verdict is the caller's); any other
# failure is the row's: FAILED (or timed out), and 1.
bench_py_cost() {
    _id=$1 _t=$2 _s=$3
    shift 3
    out=$(DETCHECK_LIB="$top/$BUILD/libdetcheck.so.0" PYTHONPATH="$top/python/src" \
        timeout "$BENCH_TIMEOUT" "$PY" -W ignore "$top/bench/$_s" "$@" 2> "$work/err")
    _rc=$?
    echo "$out" | sed 's/^/   /'
    [ "$_rc" -eq 0 ] || [ "$_rc" -eq 3 ] && return 0
    tail -n 5 "$work/err" | sed 's/^/   | /' >&2
    bench_row_failed="bench/$_s exited $_rc"
    [ "$_rc" -eq 124 ] && bench_row_failed="timed out after $BENCH_TIMEOUT s"
    bench_row_fail "$_id" "$_t"
    return 1
}

# bench_size FULL QUICK
bench_size() {
    if [ "${QUICK:-0}" = 1 ]; then echo "$2"; else echo "$1"; fi
}

# bench_cc OUT SRC [CC ARGS...]: builds a helper program into the work dir.
bench_cc() {
    _out=$1
    shift
    ${CC:-cc} -std=c11 -O2 -o "$_out" "$@" || {
        echo "$BENCH_NAME: cannot build $(basename "$_out")" >&2
        exit 2
    }
}

bench_timer_setup() {
    BENCH_TIMER=${BENCH_TIMER:-}
    if [ -z "$BENCH_TIMER" ] || [ "$BENCH_TIMER" = c ]; then
        if ${CC:-cc} -std=c11 -O2 -o "$work/measure" "$top/bench/measure.c" 2> "$work/measure.log"; then
            BENCH_TIMER=c
        elif [ "$BENCH_TIMER" = c ]; then
            cat "$work/measure.log" >&2
            exit 2
        fi
    fi
    if [ -z "$BENCH_TIMER" ] && command -v python3 > /dev/null; then BENCH_TIMER=python; fi
    if [ -z "$BENCH_TIMER" ] && [ -x /usr/bin/time ]; then BENCH_TIMER=gnu; fi
    case $BENCH_TIMER in
    c) ;;
    python) echo "note: timing with bench/measure.py (no C compiler): peak RSS includes python's own (~10 MiB)" ;;
    gnu)
        [ -x /usr/bin/time ] || { echo "$BENCH_NAME: BENCH_TIMER=gnu but no /usr/bin/time" >&2; exit 2; }
        echo "note: timing with GNU time: resolution 10 ms (start-up rows mean nothing)"
        ;;
    *)
        echo "$BENCH_NAME: no timer (BENCH_TIMER=$BENCH_TIMER; needs cc, python3 or /usr/bin/time)" >&2
        exit 2
        ;;
    esac
}

# bench_measure OUT CMD...: appends "WALL CPU RSS_KIB EXIT" to OUT; returns EXIT.
bench_measure() {
    _o=$1
    shift
    case $BENCH_TIMER in
    c) "$work/measure" "$_o" "$BENCH_TIMEOUT" "$@" ;;
    python) python3 "$top/bench/measure.py" "$_o" "$BENCH_TIMEOUT" "$@" ;;
    gnu)
        /usr/bin/time -f "%e %U %S %M" -o "$work/gnutime" timeout -k 5 "$BENCH_TIMEOUT" "$@"
        _rc=$?
        tail -n 1 "$work/gnutime" | awk -v rc="$_rc" '{ printf "%s %.6f %s %d\n", $1, $2 + $3, $4, rc }' >> "$_o"
        return $_rc
        ;;
    esac
}

# bench_run1 ID SIDE WARMUP: one run of side A or B (CMD strings are shell
# words, eval'd: quote paths in them). Warm-up runs keep stdout in
# $work/ID.SIDE.out; timed runs send it to /dev/null. Returns 1 when the exit
# status is not the wanted one (the row has then failed, said why).
bench_run1() {
    _id=$1 _side=$2 _warm=$3
    if [ "$_side" = A ]; then _cmd=$A_CMD _want=${A_RC:-0} _lab=$A_LABEL; else _cmd=$B_CMD _want=${B_RC:-0} _lab=$B_LABEL; fi
    if [ "$_warm" = 1 ]; then
        _res=$work/res/$_id.$_side.warm _sout=$work/$_id.$_side.out
    else
        _res=$work/res/$_id.$_side _sout=/dev/null
    fi
    eval "bench_measure \"\$_res\" $_cmd" < /dev/null > "$_sout" 2> "$work/$_id.$_side.err"
    _rc=$?
    [ "$_rc" -eq "$_want" ] && return 0
    if [ "$_rc" -eq 124 ]; then
        bench_row_failed="timed out (> ${BENCH_TIMEOUT} s): $_lab"
    else
        bench_row_failed="exit $_rc, wanted $_want: $_lab"
        echo "   $_lab exited $_rc (wanted $_want): $_cmd"
        tail -n 5 "$work/$_id.$_side.err" | sed 's/^/   | /'
    fi
    return 1
}

# bench_pair ID N: warm-up, then N alternating rounds (fewer when the warm-up
# says N would take more than BENCH_ROW_BUDGET). Sets bench_rounds.
bench_pair() {
    _pid=$1 _reps=${BENCH_REPS:-$2}
    [ "$QUICK" = 1 ] && [ -z "${BENCH_REPS:-}" ] && [ "$_reps" -gt 3 ] && _reps=3
    bench_row_failed=
    rm -f "$work/res/$_pid".*
    bench_run1 "$_pid" A 1 || return 1
    bench_run1 "$_pid" B 1 || return 1
    _w=$(cat "$work/res/$_pid.A.warm" "$work/res/$_pid.B.warm" | awk '{ s += $1 } END { print s }')
    bench_rounds=$(awk -v w="$_w" -v n="$_reps" -v b="$BENCH_ROW_BUDGET" \
        'BEGIN { r = (w > 0) ? int(b / w) : n; if (r > n) r = n; if (r < 1) r = 1; print r }')
    if [ "$bench_rounds" -lt "$_reps" ]; then
        echo "   ($bench_rounds rounds, not $_reps: a pair takes $(printf %.2f "$_w") s, row budget $BENCH_ROW_BUDGET s)"
    fi
    _i=0
    while [ $_i -lt "$bench_rounds" ]; do
        if [ $((_i % 2)) -eq 0 ]; then
            bench_run1 "$_pid" A 0 || return 1
            bench_run1 "$_pid" B 0 || return 1
        else
            bench_run1 "$_pid" B 0 || return 1
            bench_run1 "$_pid" A 0 || return 1
        fi
        _i=$((_i + 1))
    done
    return 0
}

# bench_single ID N: side A only (no peer), warm-up then N runs.
bench_single() {
    _pid=$1 _reps=${BENCH_REPS:-$2}
    [ "$QUICK" = 1 ] && [ -z "${BENCH_REPS:-}" ] && [ "$_reps" -gt 3 ] && _reps=3
    bench_row_failed=
    rm -f "$work/res/$_pid".*
    bench_run1 "$_pid" A 1 || return 1
    _w=$(awk '{ print $1 }' "$work/res/$_pid.A.warm")
    bench_rounds=$(awk -v w="$_w" -v n="$_reps" -v b="$BENCH_ROW_BUDGET" \
        'BEGIN { r = (w > 0) ? int(b / w) : n; if (r > n) r = n; if (r < 1) r = 1; print r }')
    _i=0
    while [ $_i -lt "$bench_rounds" ]; do
        bench_run1 "$_pid" A 0 || return 1
        _i=$((_i + 1))
    done
}

# bench_med ID SIDE COLUMN: median of a column (1 wall, 2 cpu) of the timed
# runs; bench_max ID SIDE 3: the largest peak RSS (KiB).
bench_med() {
    awk -v c="$3" '{ print $c }' "$work/res/$1.$2" | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
bench_max() {
    awk -v c="$3" 'BEGIN { m = 0 } $c > m { m = $c } END { print m }' "$work/res/$1.$2"
}

# bench_stats ID SIDE: sets S_WALL S_CPU S_RSS (MiB) of one side.
bench_stats() {
    S_WALL=$(bench_med "$1" "$2" 1)
    S_CPU=$(bench_med "$1" "$2" 2)
    S_RSS=$(awk -v k="$(bench_max "$1" "$2" 3)" 'BEGIN { printf "%.1f", k / 1024 }')
}

bench_metric() {
    _m=${BENCH_METRIC:-$1}
    case $_m in cpu | wall) echo "$_m" ;; *) echo "bench: BENCH_METRIC must be cpu or wall" >&2; echo "$1" ;; esac
}

# bench_table ID: the two sides' medians.
bench_table() {
    printf "   %-44s %10s %10s %12s\n" "$bench_rounds timed runs, medians" "CPU s" "wall s" "peak RSS"
    for _s in A B; do
        [ -f "$work/res/$1.$_s" ] || continue
        bench_stats "$1" "$_s"
        if [ "$_s" = A ]; then _l=$A_LABEL; else _l=$B_LABEL; fi
        printf "   %-44s %10.4f %10.4f %8s MiB\n" "$_l" "$S_CPU" "$S_WALL" "$S_RSS"
    done
}

# bench_summary ID TITLE DETCHECK PEER RESULT GOAL STATUS
bench_summary() {
    [ -n "${BENCH_SUMMARY:-}" ] && printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$@" >> "$BENCH_SUMMARY"
    return 0
}

bench_header() {
    echo "-- $1: $2"
}

# bench_row_fail ID TITLE: the row could not be measured (bench_row_failed says why).
bench_row_fail() {
    case $bench_row_failed in
    "timed out"*)
        echo "   $bench_row_failed: NOT met"
        bench_summary "$1" "$2" "" "" "$bench_row_failed" "" "NOT met"
        [ "$bench_status" -lt 1 ] && bench_status=1
        ;;
    *)
        echo "   FAILED: $bench_row_failed"
        bench_summary "$1" "$2" "" "" "$bench_row_failed" "" "FAILED"
        bench_status=2
        ;;
    esac
}

# bench_verdict VALUE GOAL: "met" when VALUE <= GOAL.
bench_verdict() {
    case $1 in
    "" | n/a | *nan* | *inf*) echo "NOT met" ;;
    *) awk -v v="$1" -v g="$2" 'BEGIN { print (v + 0 <= g + 0) ? "met" : "NOT met" }' ;;
    esac
}
bench_note_status() {
    [ "$1" = met ] || { [ "$bench_status" -lt 1 ] && bench_status=1; }
    return 0
}

# bench_ratio ID TITLE METRIC GOAL: after bench_pair; ratio A/B, goal <= GOAL.
bench_ratio() {
    _id=$1 _t=$2 _m=$(bench_metric "$3") _g=$4
    bench_table "$_id"
    bench_stats "$_id" A
    _ac=$S_CPU _aw=$S_WALL _ar=$S_RSS
    bench_stats "$_id" B
    _bc=$S_CPU _bw=$S_WALL
    # a peer measured at 0 s (GNU time's 10 ms resolution) gives no ratio: n/a, NOT met
    _rc=$(awk -v a="$_ac" -v b="$_bc" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }')
    _rw=$(awk -v a="$_aw" -v b="$_bw" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }')
    if [ "$_m" = cpu ]; then
        _r=$_rc _other="wall $_rw" _av=$_ac _bv=$_bc
    else
        _r=$_rw _other="CPU $_rc" _av=$_aw _bv=$_bw
    fi
    _v=$(bench_verdict "${_r%x}" "$_g")
    printf "   ratio detcheck/peer by %s time: %s (%s)   goal <= %sx   %s\n" "$_m" "$_r" "$_other" "$_g" "$_v"
    bench_note_status "$_v"
    bench_summary "$_id" "$_t" "$(printf '%.4f s %s' "$_av" "$_m")" "$(printf '%.4f s' "$_bv")" "$_r ($_m)" "<= ${_g}x" "$_v"
}

# bench_same_tensors ID: the two sides' warm-up manifests list the same
# tensors and digests (or the comparison means nothing).
bench_same_tensors() {
    grep '^- {name:' "$work/$1.A.out" | sort > "$work/$1.A.t"
    grep '^- {name:' "$work/$1.B.out" | sort > "$work/$1.B.t"
    if [ ! -s "$work/$1.A.t" ] || ! cmp -s "$work/$1.A.t" "$work/$1.B.t"; then
        bench_row_failed="the two manifests list different tensors"
        return 1
    fi
}

# bench_figure ID TITLE: after bench_single; side A's medians, a figure with
# no goal (a floor or reference next to a row).
bench_figure() {
    bench_stats "$1" A
    printf "   %-44s %10.4f %10.4f %8s MiB   (%s runs; a figure, no goal)\n" "$A_LABEL" "$S_CPU" "$S_WALL" "$S_RSS" "$bench_rounds"
    bench_summary "$1" "$2" "$(printf '%.4f s wall' "$S_WALL")" "" "$(printf '%.4f s wall, %.4f s CPU' "$S_WALL" "$S_CPU")" "(a figure)" ""
}

# bench_skip ID TITLE WHY
bench_skip() {
    bench_header "$1" "$2"
    echo "   SKIPPED: $3"
    bench_summary "$1" "$2" "" "" "$3" "" "SKIPPED"
}

bench_finish() {
    exit "$bench_status"
}

# bench_mib FILE: size in MiB, one decimal.
bench_mib() {
    awk -v b="$(wc -c < "$1")" 'BEGIN { printf "%.0f", b / 1048576 }'
}

# bench_has_numpy: 0 when $BENCH_PYTHON (bench/run.sh: ci/venv.sh bench,
# python3 or a cached venv with numpy) imports numpy.
bench_has_numpy() {
    "${BENCH_PYTHON:-python3}" -c 'import numpy' > /dev/null 2>&1
}

# bench_per_unit ID TITLE METRIC COUNT GOAL_US UNIT: after bench_pair; the
# cost per UNIT of side A beyond side B, (A - B) / COUNT, in microseconds.
bench_per_unit() {
    _id=$1 _t=$2 _m=$(bench_metric "$3") _cnt=$4 _g=$5 _u=$6
    bench_table "$_id"
    _col=2
    [ "$_m" = wall ] && _col=1
    _a=$(bench_med "$_id" A $_col)
    _b=$(bench_med "$_id" B $_col)
    _per=$(awk -v a="$_a" -v b="$_b" -v n="$_cnt" 'BEGIN { printf "%.3f", (a - b) / n * 1e6 }')
    _v=$(bench_verdict "$_per" "$_g")
    printf "   %s time per %s beyond the peer: %s us   goal <= %s us   %s\n" "$_m" "$_u" "$_per" "$_g" "$_v"
    bench_note_status "$_v"
    bench_summary "$_id" "$_t" "$(printf '%.4f s %s' "$_a" "$_m")" "$(printf '%.4f s' "$_b")" "$_per us/$_u" "<= $_g us" "$_v"
}

# bench_scale ID TITLE UNIT "SIZES" GOAL: cost at growing sizes. The script
# defines scale_gen N (writes the inputs of size N), scale_cmd N (echoes the
# detcheck command) and, with SCALE_PEER=1, scale_peer N (echoes the peer's).
# Prints CPU and wall time per UNIT at each size and the marginal CPU cost
# per UNIT between sizes; linear when the last marginal cost is at most GOAL
# times the first. A size is skipped, saying so (and the row is NOT met), when
# a run would take longer than BENCH_SCALE_CAP seconds (30; quick 10), judged
# from the sizes before it as they grew (at least linearly).
bench_scale() {
    _sid=$1 _st=$2 _su=$3 _sizes=$4 _sg=$5
    _cap=${BENCH_SCALE_CAP:-$(bench_size 30 10)}
    bench_header "$_sid" "$_st"
    if [ "${SCALE_PEER:-0}" = 1 ]; then
        printf "   %9s %9s %9s %10s %12s %12s %14s %12s\n" "$_su"s "CPU s" "wall s" "peak RSS" "CPU us/$_su" "wall us/$_su" "marginal CPU" "peer CPU us"
    else
        printf "   %9s %9s %9s %10s %12s %12s %14s\n" "$_su"s "CPU s" "wall s" "peak RSS" "CPU us/$_su" "wall us/$_su" "marginal CPU"
    fi
    _prev_n='' _prev_c='' _prev_w='' _pp_n='' _pp_w='' _first_m='' _last_m='' _skipped='' _skip='' _failed='' _why='' _nsteps=0
    for _sn in $_sizes; do
        if [ -z "$_skip" ] && [ -n "$_prev_n" ]; then
            # the time this size would take, growing as the last step grew
            # (at least linearly)
            _pred=$(awk -v t="$_prev_w" -v pt="$_pp_w" -v n="$_sn" -v q="$_prev_n" -v pq="$_pp_n" 'BEGIN {
                k = 1; if (pq != "" && pt > 0 && t > pt) { e = log(t / pt) / log(q / pq); if (e > k) k = e }
                printf "%.1f", t * exp(k * log(n / q)) }')
            if [ "$(awk -v p="$_pred" -v c="$_cap" 'BEGIN { print (p > c) }')" = 1 ]; then
                _skip=1
                _why="predicted $_pred s a run from the sizes before"
            fi
        fi
        if [ -n "$_skip" ]; then
            _skipped="$_skipped $_sn"
            continue
        fi
        scale_gen "$_sn" || { bench_row_failed="cannot write the inputs of size $_sn"; _failed=1; break; }
        A_LABEL="$_sn ${_su}s" A_CMD=$(scale_cmd "$_sn") A_RC=0
        if [ "${SCALE_PEER:-0}" = 1 ]; then
            B_LABEL="peer, $_sn ${_su}s" B_CMD=$(scale_peer "$_sn") B_RC=0
            bench_pair "$_sid-$_sn" 3 || { _failed=1; break; }
        else
            bench_single "$_sid-$_sn" 3 || { _failed=1; break; }
        fi
        bench_stats "$_sid-$_sn" A
        _scpu=$S_CPU
        _mg=
        if [ -n "$_prev_n" ]; then
            _mg=$(awk -v c="$_scpu" -v p="$_prev_c" -v n="$_sn" -v q="$_prev_n" 'BEGIN { printf "%.3f", (c - p) / (n - q) * 1e6 }')
            [ -z "$_first_m" ] && _first_m=$_mg
            _last_m=$_mg _nsteps=$((_nsteps + 1))
        fi
        _pc=
        if [ "${SCALE_PEER:-0}" = 1 ]; then
            _pc=$(awk -v c="$(bench_med "$_sid-$_sn" B 2)" -v n="$_sn" 'BEGIN { printf "%.3f", c / n * 1e6 }')
        fi
        printf "   %9s %9.4f %9.4f %6s MiB %12.3f %12.3f %14s" "$_sn" "$_scpu" "$S_WALL" "$S_RSS" \
            "$(awk -v c="$_scpu" -v n="$_sn" 'BEGIN { print c / n * 1e6 }')" \
            "$(awk -v c="$S_WALL" -v n="$_sn" 'BEGIN { print c / n * 1e6 }')" "${_mg:--}"
        if [ -n "$_pc" ]; then printf " %12s\n" "$_pc"; else echo; fi
        _pp_n=$_prev_n _pp_w=$_prev_w
        _prev_n=$_sn _prev_c=$_scpu _prev_w=$S_WALL
        _slow=$(awk -v w="$(bench_max "$_sid-$_sn" A 1)" -v c="$_cap" 'BEGIN { print (w > c) }')
        [ "$_slow" = 1 ] && _skip=1 _why="a run of $_sn took more than $_cap s"
        rm -rf "$work/scale"
    done
    if [ -n "$_failed" ]; then
        bench_row_fail "$_sid" "$_st"
        return 1
    fi
    if [ -z "$_first_m" ]; then
        _sres="no marginal cost (one size)"
    elif [ "$_nsteps" -eq 1 ]; then
        _sres="marginal CPU per $_su $_first_m us (one step)"
    else
        _sres="marginal CPU per $_su $_first_m -> $_last_m us"
    fi
    if [ -n "$_skipped" ]; then
        echo "   skipped:$_skipped ($_why; limit $_cap s a run: BENCH_SCALE_CAP)"
        _v="NOT met"
        _sres="$_sres; skipped:$_skipped"
    elif [ -z "$_first_m" ]; then
        _v="NOT met"
    else
        _gr=$(awk -v a="$_first_m" -v b="$_last_m" 'BEGIN { printf "%.2f", (a > 0) ? b / a : 0 }')
        _v=$(bench_verdict "$_gr" "$_sg")
        _sres="$_sres (${_gr}x)"
        printf "   marginal CPU cost per %s, last step / first step: %sx   goal <= %sx (linear)   %s\n" "$_su" "$_gr" "$_sg" "$_v"
    fi
    bench_note_status "$_v"
    bench_summary "$_sid" "$_st" "" "" "$_sres" "linear (<= ${_sg}x)" "$_v"
}

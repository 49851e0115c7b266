#!/bin/sh
# ci/gpu-check.sh: the GPU check of detcheck. Goal: the whole `run` under 5
# minutes on one H200 (not yet measured on a GPU: no device has been lent to
# this project; the estimate is below, under TIME).
#
#   1. the CUDA test suite (tests/gpu/check_cuda): GPU digests bit-equal to
#      the CPU digest for every dtype, every length 0..64 KiB and the lengths
#      around every segment edge up to 1 MiB (at rotating misalignments),
#      random fragment offsets (GPU and CPU partials mixed), 8 GiB tensors;
#      the C example (examples/gpu_hash.c) and, when PyTorch is there, the
#      ctypes example on live CUDA tensors (examples/torch_cuda_hash.py --check)
#      and the Python package's digests of live CUDA tensors
#      (python/tests/test_digest.py -k cuda; detcheck-gpu(7), LIBRARY);
#      cuBLAS, train --bench's baselines, in its own program and row
#      (tests/gpu/check_cublas: the trainer's products through cuBLAS ==
#      the reference GEMM's; TF32 mode accepted), so that a machine without
#      cuBLAS skips that row only, never the digest suite.
#   2. `detcheck hash --device cuda` against the CPU path: identical manifests
#      (a small mixed checkpoint, the CLI tests test_distributed*)
#   3. the benchmark: digest throughput over an 8 GiB device buffer vs a
#      kernel that only reads it as 64-bit words (goal >= 0.8); `hash --device
#      cuda` vs the CPU path on a 4 GiB file in the page cache (identical
#      manifests, both times); detcheck.Recorder's per-step digests of a
#      1B-parameter model vs its AdamW step (bench/recorder_cost.py, goal
#      <= 2%; detcheck-gpu(7), LIBRARY), when PyTorch with CUDA is there;
#      detcheck.seal of a 2 GiB CUDA state after dcp.save (bench/seal_cost.py,
#      goal < 1%; its files verified against the seal; detcheck-seal(1));
#      detcheck.ReplicaGuard.step every step after the AdamW step of the 1B
#      model under DDP (bench/replica_cost.py, goal < 1%; python/README.md, "Replica guard").
#   4. the trainer on the GPU (detcheck-gpu(7), TRAINING): `train --device cuda` == CPU at
#      every step (fp32, bf16; the tiny preset, and GPT-2 small's shapes in
#      2 layers: SMALL), 2 and 4 ranks
#      on one GPU, resumes across devices (the schedule given explicitly: a
#      resumed run keeps the checkpoint's decay_steps), fast mode differs,
#      `train --bench` (determinism tax, FMA-peak share: at most 50% with
#      --fmad=false; rows "cuBLAS FP32 (no TF32)" and "cuBLAS TF32").
#   5. detcheck canary on the GPU (detcheck-canary(1)): record == the CPU golden, an
#      injected bit flip is caught and named, 2 ranks on one GPU.
#   6. op tracing on the GPU (detcheck-bisect(1), TRACE FILES), when PyTorch with CUDA is there: a
#      model summing rows into buckets with index_add_ and scatter_add_
#      (atomicAdd on CUDA) trained twice, recorded with trace="ops":
#      6a. with torch.use_deterministic_algorithms(False), `detcheck bisect`
#          must name that op ("first differing op: ... aten.index_add_...
#          inputs equal, output differs (culprit)"); when the two runs happen
#          to agree this is a SKIP ("not reproduced"), never a PASS;
#      6b. with torch.use_deterministic_algorithms(True) (and
#          CUBLAS_WORKSPACE_CONFIG=:4096:8) the same script is reproducible;
#      6c. the cost of module tracing, every step, on the 1B model of 3
#          (bench/recorder_cost.py --tracing, 2 rounds, goal < 5%).
#      The two runs of 6a and of 6b run at once.
#
# RESULTS. Every check is one row of the summary table printed at the end
# (section, PASS/FAIL/SKIP, figure, goal): PASS only when the check ran and
# held. A SKIP says why: a program that exits 77 (no device, a CLI test that
# skipped in whole or in part), mpirun or the Open MPI runtime missing (the
# multi-rank checks), no PyTorch with CUDA, or a check with no CPU twin in
# twin mode. A loader failure other than "no CUDA device" (cudart or NCCL
# that cannot be loaded, a missing function) is a FAIL of the probe, and the
# GPU checks are then SKIPs naming it. A speed goal missed is a PASS row
# whose goal column says "NOT met" (exit 3).
#
# TIME. Every section runs under its own limit (timeout(1), the whole process
# group: a hung rank cannot outlive it) and within the whole run's budget,
# DCK_GPU_CHECK_BUDGET seconds (default 290): a section cut by its limit is a
# FAIL "timed out", a section with no budget left a SKIP, so `run` ends
# within 5 minutes whatever happens. The limits are the table SECTIONS
# below (s): probe 60, 1: 80, 2: 30, 3: 100, 4: 90, 5: 20, 6: 45.
# Estimate of a passing run on the GPU host (one H100 or H200, 16 cores),
# not yet measured on a GPU (each section's time is in the log). The method:
#   estimate(section) = its CPU seconds in the twin mode here (user + sys of
#       its processes, `times`; load-independent, and an upper bound of their
#       wall time on the host, where they run in turn on cores taken as no
#       faster than these, the twin's kernels included though a GPU runs
#       them) + its GPU-only seconds (SECTIONS), derived below from CPU
#       timings measured here (a shared 2-core AMD EPYC VM, /usr/bin/time,
#       user + sys) scaled to the host: a CPU process takes its serial part
#       plus its parallel part over min(16 cores, its threads' work items);
#       GPU work bounded by its bytes (~20 GB/s to the host, ~2 TB/s in
#       memory) and FLOPs (the kernels at >= 5 TFLOP/s, cuBLAS and torch
#       FP32 at >= 40); ~1 s of CUDA context and fatbin loading a process.
#   `sh ci/gpu-check.sh estimate $OUT/gpu-check-times.tsv` prints it from a
#   twin run's times (written there by every run) and exits 1 when a
#   section's estimate exceeds its limit or the sum the budget;
#   tests/cli/test_gpu_check_twin.sh runs it in make check.
# Twin CPU seconds here: 4: 10.4 (16.4 s wall on 2 loaded cores); 1, 2, 3,
# 5, 6: under 0.5 each. GPU-only seconds:
#   probe  3: one CUDA process
#   1     45: check_cuda's ~73k lengths x 2 passes at ~20-40 us a GPU call,
#          400 fragment rounds, 8 GiB filled by 16 threads and hashed 3 times
#          (~25 s); check_cublas, examples and pytest (torch imports) ~20 s
#   2     12: test_distributed* took 13 s here on 2 loaded cores
#   3     75: bench_gpu (8 GiB, 6 reps) ~5 s; the 4 GiB file written once and
#          hashed 8 times ~15 s; the 1B Recorder ~25 s; the 1B replica guard
#          ~30 s (9 steps of ~1 s, or ~2 s with 2 ranks on one GPU)
#   4     62: the two small CPU references (SMALL: GPT-2 small's shapes in 2
#          layers, 92M parameters, 8 microbatches of 16 tokens, 2 steps):
#          18.7 and 20.1 CPU s here on 2 threads, of which ~3.5 s serial
#          (the model's init 1.6 s, one root digest of 1.1 GB on one thread,
#          the 1.1 GB checkpoint), the rest over 8 cores: ~6 s each, 12;
#          their device runs: CUDA 1 + init 1.6 + 2 steps of 40 GFLOP + the
#          1.1 GB state to the host, its root and checkpoint ~2: ~5 each,
#          10; the other 11 device processes' start-up (kernels, tiny x3,
#          resumes x2, resume-check x2, fast x2, bench) 11, the 2 and 4
#          ranks' 4; the bench (BENCH: 9 runs, each the init of 92M
#          parameters 1.6 s + 2 steps of 0.65 TFLOP + uploads ~0.5 s; the
#          FMA peak and the two cuBLAS rows ~2 s) 21; check_train_gpu 2;
#          est. 72. (As it was, 12 layers, 2 microbatches of 64 tokens and
#          the bench at 163M x 9: a CPU reference 37 CPU s here, on 2
#          threads whatever the cores, ~20 s wall each; a root of 1.9 GB a
#          step; ~115 s in all.)
#   5      5: three device processes and 2 ranks' start-up
#   6     32: four atomics.py processes, two at a time (torch's import and
#          CUDA start-up ~6 s a pair) 12; two bisects 2; 6c: torch 5, the
#          1B model and AdamW 3, warm-up + 2 rounds x 2 variants of a 49
#          TFLOP step ~6 s: 14
# about 246 s in all (the estimate's output); the budget caps it at 290 s.
#
# TWIN MODE. `DCK_GPU_CHECK_TWIN=1 sh ci/gpu-check.sh run` (or `sh
# ci/gpu-check.sh twin`), on any machine, from an ordinary build B (default
# build): every section runs with `--device twin` where the GPU path has a
# CPU twin (train, resume-check, canary), at small sizes (the small preset
# cut to one layer of width 96, 2 heads, 16 tokens and a 512-token
# vocabulary; a 64 MiB file; the benchmark on the tiny preset),
# with the same logic, limits and table. Checks with no twin (the CUDA
# programs, `hash --device cuda`, torch on CUDA) are SKIPs; the hash
# sections still run their plumbing (inputs, commands, comparisons) with the
# CPU path standing in, so a broken section is a FAIL on the CPU.
# tests/cli/test_gpu_check_twin.sh runs it in `make check`.
# DCK_GPU_CHECK_SECTIONS="4 5" runs only those sections (either mode).
#
# LIBRARIES. The GPU machine may have no package registry and not the -dev
# libraries detcheck builds against, so the check has two phases:
#
#   sh ci/gpu-check.sh build   on a development machine (nvcc + the -dev
#                              packages; CUDA 13, sm_90): builds $B (default
#                              build-gpucheck/) with CUDA: library, CLI,
#                              tests/gpu programs; copies the shared libraries
#                              they load (xxhash, zstd, yaml, jansson, ...)
#                              into $B/lib, and cudart, which detcheck loads
#                              with dlopen on its first GPU call (ldd does not
#                              list it), leaving out glibc, libstdc++, the
#                              driver and NCCL (218 MB, also dlopen'ed; the
#                              GPU machine has its own).
#   sh ci/gpu-check.sh run     on the GPU machine, from the carried $B.
#   sh ci/gpu-check.sh         both, on a machine that has everything.
#   sh ci/gpu-check.sh cpu     the CPU twin of section 6 (op tracing) on any
#                              machine with torch (DCK_TORCH_PYTHON or
#                              ci/venv.sh torch), from an ordinary build $B
#                              (default build): 6a records and bisects two CPU
#                              runs (a SKIP unless they differ) and a planted
#                              index_add_ difference that must be named; 6b
#                              and 6c as on the GPU (6c: CPU goal < 15%).
#
# The libraries of $B/lib are given per command, never exported to the whole
# script: detcheck runs through a wrapper ($work/bin/detcheck, also under
# mpirun) that sets LD_LIBRARY_PATH=$B/lib for itself only; the tests/gpu
# programs get it on their command line; Python (torch) gets only the
# Debian libraries libdetcheck.so needs ($work/lib-deb: $B/lib without
# cudart), with DETCHECK_CUDART_LIB / DETCHECK_NCCL_LIB naming the runtime
# and NCCL; mpirun and torch never see $B/lib or NCCL's folder.
#
# With the device tool of this workspace: `sh ci/gpu-check.sh build` here,
# then one call: run(command="sh ci/gpu-check.sh run", carry=["build-gpucheck"]).
# The log is also written to $OUT/gpu-check.log when $OUT is set.
# Exit: 0 all passed (or skipped) and every goal met; 1 a check failed; 3
# only a speed goal missed; 77 no GPU (nothing run, says why).
set -u
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
top=${DCK_GPU_CHECK_TOP:-$(cd "$(dirname "$0")/.." && pwd)}
times_file=${2:-} # estimate TIMES, from where it was named
case $times_file in /* | "") ;; *) times_file=$PWD/$times_file ;; esac
cd "$top" || exit 2
phase=${1:-all}
[ "$phase" = twin ] && { phase=run; DCK_GPU_CHECK_TWIN=1; }
TWIN=${DCK_GPU_CHECK_TWIN:-0}
[ "$TWIN" = 0 ] || TWIN=1
DCK_GPU_CHECK_TWIN=$TWIN
export DCK_GPU_CHECK_TWIN
if [ "$phase" = cpu ] || [ "$TWIN" = 1 ]; then B=${B:-build}; else B=${B:-build-gpucheck}; fi
case $B in /*) BA=$B ;; *) BA=$top/$B ;; esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1


build() {
    nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) ||
        { echo "gpu-check build: no nvcc"; exit 2; }
    make BUILD="$B" CUDA=1 NVCC="$nvcc" -j"$(nproc)" all gpu-tests || exit 2
    mkdir -p "$B/lib"
    for f in "$B/detcheck" "$B/libdetcheck.so" "$B"/tests/gpu/*; do [ -x "$f" ] && ldd "$f"; done |
        awk '/=> \// {print $3}' | sort -u | while read -r lib; do
            case $(basename "$lib") in
            libc.so* | libm.so* | libpthread* | libdl.so* | librt.so* | libgcc_s* | \
                libstdc++* | ld-linux* | libnccl* | libcuda.so*) ;;
            *) cp -L "$lib" "$B/lib/" ;;
            esac
        done
    # the runtime that src/gpu/cuda_loader.c dlopens: libcudart.so.MAJOR
    cuda_home=$(dirname "$(dirname "$nvcc")")
    cudart=$(ls "$cuda_home"/lib64/libcudart.so.[0-9]* 2>/dev/null | grep -E 'so\.[0-9]+$' | head -n 1)
    [ -n "$cudart" ] || { echo "gpu-check build: no libcudart.so.N under $cuda_home/lib64"; exit 2; }
    cp -L "$cudart" "$B/lib/"
    echo "gpu-check build: $B ready ($(du -sh "$B" | cut -f1)); carry it to the GPU machine"
}

# Where NCCL lives on the GPU machine: the loader's cache, the CUDA toolkit,
# or PyTorch's pip wheel (nvidia-nccl-cu*).
nccl_dir() {
    p=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 / {print $NF; exit}')
    [ -n "$p" ] && { dirname "$p"; return; }
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
        [ -e "$d/libnccl.so.2" ] && { echo "$d"; return; }
    done
    python3 - 2>/dev/null <<'PY'
import glob, os, site, sys
for s in site.getsitepackages() + [site.getusersitepackages()]:
    for p in glob.glob(os.path.join(s, "nvidia", "nccl", "lib", "libnccl.so*")):
        print(os.path.dirname(p)); sys.exit(0)
PY
}

secs() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(secs)" 'BEGIN {printf "%.2f", b - a}'; }

# One row of the summary: RESULT LABEL [FIGURE] [GOAL], appended to $RES
# (a file: sections run in their own processes).
row() {
    printf '%s\t%s\t%s\t%s\n' "$2" "$1" "$(printf '%s' "${3:-}" | tr '\t\n' '  ' | sed 's/ *$//')" "${4:-}" >> "$RES"
    echo "   -> $1  $2${3:+: $3}${4:+  [goal $4]}"
}
pass() { row PASS "$@"; }
failed() { row FAIL "$@"; }
skipped() { row SKIP "$@"; }
# a program's exit: 0 PASS, 77 SKIP (its last line says why), else FAIL.
# verdict LABEL RC LOG [FIGURE]
verdict() {
    case $2 in
    0) pass "$1" "${4:-}" ;;
    77) skipped "$1" "exit 77: $(grep -v '^ *$' "$3" 2> /dev/null | tail -n 1)" ;;
    *) failed "$1" "exit $2${4:+, $4}" ;;
    esac
}
# the summary line of tests/run.sh: PASS only when every test passed whole
run_sh_verdict() { # LABEL RC LOG
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$3" | tail -n 1)
    case $last in
    "") failed "$1" "tests/run.sh exit $2, no summary line" ;;
    *" 0 failed, 0 skipped") [ "$2" = 0 ] && pass "$1" "$last" || failed "$1" "exit $2: $last" ;;
    *" 0 failed,"*) skipped "$1" "$last: $(sed -n '/^skipped/,/^failed\|^[0-9]/p' "$3" | grep '^  ' | head -n 2 | tr '\n' ' ')" ;;
    *) failed "$1" "$last" ;;
    esac
}
# detcheck's and the tests/gpu programs' libraries, for that command only
dl() { LD_LIBRARY_PATH="$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
# Python (torch): the Debian libraries libdetcheck.so needs, no CUDA library
pyrun() {
    if [ -n "${PYLIBS:-}" ]; then
        env LD_LIBRARY_PATH="$PYLIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" DETCHECK_LIB="$LIB" \
            PYTHONPATH="$top/python/src${PYTHONPATH:+:$PYTHONPATH}" "$@"
    else
        env DETCHECK_LIB="$LIB" PYTHONPATH="$top/python/src${PYTHONPATH:+:$PYTHONPATH}" "$@"
    fi
}
torch_cuda() { "${TPY:-python3}" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2> /dev/null; }
twin_only() { [ "$TWIN" = 1 ]; }
# SKIP for a check with no CPU twin (twin mode) or no usable GPU; 0 when it may run
gpu_only() { # LABEL [TWIN_NOTE]
    if twin_only; then skipped "$1" "no CPU twin: needs a GPU${2:+ ($2)}"; return 1; fi
    return 0
}
mpi_ok() { # LABEL: SKIP naming what is missing
    [ -z "$MPI_MISSING" ] && return 0
    skipped "$1" "$MPI_MISSING"
    return 1
}

# 1. the CUDA programs and examples
sec_1() {
    if gpu_only "1 CUDA suite (tests/gpu/check_cuda)" "its kernels' CPU twin: tests/check_gpu_twin in make check"; then
        t=$(secs)
        dl "$B/tests/gpu/check_cuda" > "$work/s1-cuda.log" 2>&1
        rc=$?
        tail -n 20 "$work/s1-cuda.log" | sed 's/^/   /'
        verdict "1 CUDA suite (tests/gpu/check_cuda)" $rc "$work/s1-cuda.log" "$(elapsed "$t") s"
    fi
    # cuBLAS (train --bench's baselines) in a row of its own: its absence
    # (found as detcheck doctor finds it) is a SKIP here, never of the suite
    if gpu_only "1 cuBLAS baseline products (tests/gpu/check_cublas)" "the mapping's reference GEMM: tests/check_gpu_blas in make check"; then
        dl "$B/tests/gpu/check_cublas" > "$work/s1-cublas.log" 2>&1
        rc=$?
        sed 's/^/   /' "$work/s1-cublas.log" | tail -n 7
        verdict "1 cuBLAS baseline products (tests/gpu/check_cublas)" $rc "$work/s1-cublas.log"
    fi
    if gpu_only "1 C example examples/gpu_hash.c"; then
        dl "$B/tests/gpu/gpu_hash" > "$work/s1-ex.log" 2>&1
        rc=$?
        sed 's/^/   /' "$work/s1-ex.log" | tail -n 5
        verdict "1 C example examples/gpu_hash.c" $rc "$work/s1-ex.log"
    fi
    if gpu_only "1 PyTorch ctypes example (--check)" "torch on CUDA"; then
        if torch_cuda; then
            pyrun python3 examples/torch_cuda_hash.py --lib "$LIB" --check > "$work/s1-torch.log" 2>&1
            rc=$?
            tail -n 5 "$work/s1-torch.log" | sed 's/^/   /'
            verdict "1 PyTorch ctypes example (--check)" $rc "$work/s1-torch.log"
        else skipped "1 PyTorch ctypes example (--check)" "no PyTorch with CUDA here"; fi
    fi
    if gpu_only "1 Python package on CUDA tensors" "torch on CUDA"; then
        if torch_cuda && python3 -c "import pytest" 2> /dev/null; then
            DETCHECK="$D" pyrun env PYTHONPATH="$top/python/src:$top/python/tests" python3 -m pytest -q \
                -p no:cacheprovider python/tests/test_digest.py -k cuda > "$work/s1-py.log" 2>&1
            rc=$?
            tail -n 5 "$work/s1-py.log" | sed 's/^/   /'
            last=$(tail -n 1 "$work/s1-py.log")
            case $rc in
            0) case $last in
               *skipped*) skipped "1 Python package on CUDA tensors" "$last" ;;
               *) pass "1 Python package on CUDA tensors" "$last" ;;
               esac ;;
            5) skipped "1 Python package on CUDA tensors" "no test collected: $last" ;;
            *) failed "1 Python package on CUDA tensors" "pytest exit $rc: $last" ;;
            esac
        else skipped "1 Python package on CUDA tensors" "no PyTorch with CUDA and pytest here"; fi
    fi
}

# 2. hash --device cuda against the CPU path
sec_2() {
    if twin_only; then
        skipped "2 CLI tests test_distributed*" "no GPU branch to run on the twin (they run in make check)"
    else
        DCK_DETCHECK="$D" DCK_NO_MPI_TESTS="$MPI_MISSING" sh tests/run.sh "$B" distributed > "$work/s2-cli.log" 2>&1
        rc=$?
        tail -n 8 "$work/s2-cli.log" | sed 's/^/   /'
        run_sh_verdict "2 CLI tests test_distributed* (GPU branches)" $rc "$work/s2-cli.log"
    fi
    (cd "$work" && python3 - <<'PY'
import json, struct, random
rnd = random.Random(1)
sizes = {"F32": 4, "BF16": 2, "U8": 1, "F64": 8, "F16": 2}
for f in range(3):
    hdr, data = {}, bytearray()
    for i in range(40):
        dt = rnd.choice(list(sizes))
        shape = [rnd.randint(1, 300), rnd.randint(1, 3000 if i % 7 == 0 else 70)]
        n = sizes[dt] * shape[0] * shape[1]
        hdr["model.layers.%d.t%d" % (f, i)] = {"dtype": dt, "shape": shape,
                                               "data_offsets": [len(data), len(data) + n]}
        data += rnd.randbytes(n)
    h = json.dumps(hdr).encode()
    open("mixed%d.safetensors" % f, "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))
PY
    )
    l="2 mixed checkpoint, 4 MiB staging buffers"
    if SOURCE_DATE_EPOCH=1700000000 "$D" hash -o "$work/mixed-cpu.yaml" "$work"/mixed*.safetensors &&
        SOURCE_DATE_EPOCH=1700000000 DETCHECK_GPU_BUFFER_MIB=4 "$D" hash --device "$HASHDEV" \
            -o "$work/mixed-gpu.yaml" "$work"/mixed*.safetensors &&
        cmp "$work/mixed-cpu.yaml" "$work/mixed-gpu.yaml"; then
        if twin_only; then skipped "$l" "no twin of hash --device cuda: plumbing run with the CPU path, manifests equal"
        else pass "$l" "--device cuda manifest == CPU manifest"; fi
    else failed "$l" "--device $HASHDEV manifest differs from the CPU's (or a hash failed)"; fi
}

# cost_row LABEL TWIN GOAL PREFIXES SCRIPT ARGS...: a Python cost benchmark on
# CUDA (GPU only; PyTorch with CUDA): its output, and one row whose figure is
# the lines starting with PREFIXES ('|'-separated), PASS with "GOAL: met" or
# "NOT met" by its exit status (0 or 3), FAIL otherwise.
cost_row() {
    _l=$1 _twin=$2 _goal=$3 _pre=$4
    shift 4
    gpu_only "$_l" "$_twin" || return 0
    if ! torch_cuda; then skipped "$_l" "no PyTorch with CUDA here"; return 0; fi
    _out=$(pyrun python3 "$@")
    _rc=$?
    echo "$_out" | sed 's/^/   /'
    _g=$(echo "$_pre" | tr '|' '\n' | while read -r _p; do echo "$_out" | sed -n "s/^$_p *//p"; done | paste -sd ';' - | sed 's/;/; /g')
    case $_rc in
    0) pass "$_l" "$_g" "$_goal: met" ;;
    3) pass "$_l" "$_g" "$_goal: NOT met" ;;
    *) failed "$_l" "$1 exit $_rc" ;;
    esac
}

# 3. the benchmarks
sec_3() {
    if gpu_only "3 digest throughput, 8 GiB (bench_gpu)"; then
        dl "$B/tests/gpu/bench_gpu" 8 > "$work/s3-bench.log" 2>&1
        rc=$?
        sed 's/^/   /' "$work/s3-bench.log" | tail -n 12
        fig=$(grep -v '^ *$' "$work/s3-bench.log" | tail -n 1)
        case $rc in
        0) pass "3 digest throughput, 8 GiB (bench_gpu)" "$fig" ">= 0.8 of the read-only kernel: met" ;;
        3) pass "3 digest throughput, 8 GiB (bench_gpu)" "$fig" ">= 0.8 of the read-only kernel: NOT met" ;;
        *) verdict "3 digest throughput, 8 GiB (bench_gpu)" $rc "$work/s3-bench.log" ;;
        esac
    fi
    # a big file of 16 BF16 tensors (a random block repeated): 4 GiB on the
    # GPU, 64 MiB in twin mode
    if twin_only; then mib=64; else mib=4096; fi
    (cd "$work" && python3 - "$mib" <<'PY'
import json, os, struct, sys
total = int(sys.argv[1]) << 20
block = os.urandom(total // 64)
hdr, n = {}, total // 16
for i in range(16):
    hdr["model.layers.%d.weight" % i] = {"dtype": "BF16", "shape": [n // 2 // 4096, 4096],
                                         "data_offsets": [i * n, (i + 1) * n]}
h = json.dumps(hdr).encode()
with open("big.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for _ in range(64):
        f.write(block)
PY
    ) || { failed "3 hash of a ${mib} MiB file" "writing the file failed"; mib=; }
    if [ -n "$mib" ]; then
        cat "$work/big.safetensors" > /dev/null # into the page cache
        best() { # best of 2 wall times of a command
            b=""
            for i in 1 2; do
                t=$(secs)
                "$@" > /dev/null || return 1
                e=$(elapsed "$t")
                b=$(awk -v a="$e" -v b="${b:-1e9}" 'BEGIN {print (a < b) ? a : b}')
            done
            echo "$b"
        }
        export SOURCE_DATE_EPOCH=1700000000
        l="3 hash of a ${mib} MiB file, --device $HASHDEV vs CPU"
        if tc=$(best "$D" hash -o "$work/big-cpu.yaml" "$work/big.safetensors") &&
            tg=$(best "$D" hash --device "$HASHDEV" -o "$work/big-gpu.yaml" "$work/big.safetensors") &&
            tcn=$(best "$D" hash --no-files -o "$work/big-cpu-nf.yaml" "$work/big.safetensors") &&
            tgn=$(best "$D" hash --no-files --device "$HASHDEV" -o "$work/big-gpu-nf.yaml" "$work/big.safetensors"); then
            fig=$(awk -v c="$tc" -v g="$tg" -v cn="$tcn" -v gn="$tgn" -v m="$mib" 'BEGIN {
                gb = m / 1024 * 1.073741824
                if (c < 0.01) c = 0.01; if (g < 0.01) g = 0.01
                printf "CPU %.2f s (%.2f GB/s), device %.2f s (%.2f GB/s, x%.2f); --no-files %.2f / %.2f s", c, gb / c, g, gb / g, c / g, cn, gn }')
            echo "   $fig"
            if cmp "$work/big-cpu.yaml" "$work/big-gpu.yaml" && cmp "$work/big-cpu-nf.yaml" "$work/big-gpu-nf.yaml"; then
                if twin_only; then skipped "$l" "no twin of hash --device cuda: plumbing run with the CPU path, manifests equal ($fig)"
                else pass "$l" "manifests equal; $fig"; fi
            else failed "$l" "manifests differ"; fi
        else failed "$l" "a hash failed"; fi
    fi
    # the Python Recorder's cost (detcheck-gpu(7), LIBRARY): per-tensor digests of every
    # parameter and gradient of a 1.007B-parameter F32 MLP (15 x 8192x8192)
    # after each AdamW step of 8192 rows, vs the step (synchronized wall
    # time; goal <= 2%). About 25 GB of GPU memory.
    cost_row "3b Recorder cost, 1B params on CUDA" "its CPU twin: make bench" "<= 2%" "goal" \
        bench/recorder_cost.py --device cuda --width 8192 --layers 15 --batch 8192 --steps 5 --goal 0.02
    # sealed checkpoints (detcheck-seal(1), COST): detcheck.seal of a 2 GiB
    # state in GPU memory after dcp.save, digested on the device (goal < 1%
    # of the save), and the files checked offline against that seal
    cost_row "3c seal cost, 2 GiB on CUDA" "its CPU twin: make bench (row seal)" "< 1%" "ratio seal" \
        bench/seal_cost.py --device cuda --mib 2048 --rounds 2 --check "$D"
    # the replica guard (python/README.md, "Replica guard"): ReplicaGuard.step
    # at every=1 after each AdamW step of the 1B model of 3b, 2 replicas
    # (DDP over NCCL with 2 GPUs; on one GPU the 2 ranks share it over gloo,
    # without DDP, each taking the same step), parameters and AdamW's moments
    # digested on the device (goal < 1% of the step; 16 bytes gathered a rank
    # per check); every=10 is a figure. About 25 GB a rank.
    cost_row "3d replica guard cost, 1B params on CUDA" "its CPU twin: make bench (row replica)" \
        "< 1% at every=1, 16 B gathered" "goal 1|goal bytes" \
        bench/replica_cost.py --device cuda --width 8192 --layers 15 --batch 8192 --rounds 1
}

# 4. the trainer on the GPU (detcheck-gpu(7), TRAINING): its trajectory == the CPU's at every
# step (loss, grad norm, root bits) for fp32 and bf16, tiny and (shortened)
# small presets; 2 and 4 ranks sharing the GPU == 1 rank; checkpoints CPU ->
# GPU and GPU -> CPU; resume-check on the GPU; fast mode differs; the
# benchmark.
sec_4() {
    tw="$work/train"
    mkdir -p "$tw"
    T="$D train -q"
    # The schedule, explicit in every run compared with the 12-step
    # reference: a resumed run keeps the checkpoint's decay_steps, so `--steps
    # 6` then `--steps 12 --resume` would decay over 6 steps and part from
    # the reference at step 11 whatever the device does (detcheck-train(1), NON-FINITE VALUES).
    sched="--decay-steps 12"
    same_traj() { # name, flags...: CPU run == device run, every step
        n=$1
        shift
        t=$(secs)
        if $T "$@" --out "$tw/$n-cpu" --threads "$(nproc)" && $T "$@" --out "$tw/$n-dev" --device "$DEV" &&
            cmp "$tw/$n-cpu/trajectory.jsonl" "$tw/$n-dev/trajectory.jsonl" &&
            "$D" verify --golden "$tw/$n-cpu/step_$(printf %08d "$steps")/manifest.json" \
                "$tw/$n-dev/step_$(printf %08d "$steps")" > "$tw/$n.verify" 2>&1; then
            pass "4 train $n == CPU" "trajectory and checkpoint on $DEV ($(elapsed "$t") s)"
        else failed "4 train $n == CPU" "$DEV differs from the CPU (or a run failed)"; fi
    }
    # stage by stage first, so that a difference is named (activations,
    # loss, each parameter's gradient, norm, AdamW)
    if gpu_only "4 trainer kernels stage by stage" "their twin: tests/check_train_twin in make check"; then
        t=$(secs)
        dl "$B/tests/gpu/check_train_gpu" > "$work/s4-kern.log" 2>&1
        rc=$?
        tail -n 10 "$work/s4-kern.log" | sed 's/^/   /'
        verdict "4 trainer kernels stage by stage" $rc "$work/s4-kern.log" "$(elapsed "$t") s"
    fi
    steps=12
    same_traj tiny-fp32 --steps 12 $sched
    same_traj tiny-bf16 --steps 12 $sched --precision bf16
    same_traj tiny-b4 --steps 12 $sched --batch 4 --microbatches 4 --precision bf16
    steps=2
    same_traj small-fp32 $SMALL --steps 2
    same_traj small-bf16 $SMALL --steps 2 --precision bf16
    for k in 2 4; do
        l="4 train: $k ranks on one device == 1 rank"
        if mpi_ok "$l"; then
            if mpirun --oversubscribe -np $k $T --steps 12 $sched --out "$tw/k$k" --device "$DEV" &&
                cmp "$tw/tiny-fp32-cpu/trajectory.jsonl" "$tw/k$k/trajectory.jsonl"; then
                pass "$l" "on $DEV"
            else failed "$l" "$k ranks on $DEV differ from 1 rank (or the run failed)"; fi
        fi
    done
    l="4 resume CPU -> $DEV -> CPU"
    t=$(secs)
    if $T --steps 6 $sched --out "$tw/c2g" && $T --steps 12 $sched --out "$tw/c2g" --resume --device "$DEV" &&
        cmp "$tw/tiny-fp32-cpu/trajectory.jsonl" "$tw/c2g/trajectory.jsonl" &&
        $T --steps 6 $sched --out "$tw/g2c" --device "$DEV" && $T --steps 12 $sched --out "$tw/g2c" --resume &&
        cmp "$tw/tiny-fp32-cpu/trajectory.jsonl" "$tw/g2c/trajectory.jsonl"; then
        pass "$l" "both resumes reproduce the 12-step trajectory ($(elapsed "$t") s)"
    else failed "$l" "a resume across devices differs from the reference (or failed)"; fi
    l="4 resume-check on $DEV"
    if "$D" resume-check --steps 6 --at 3 --device "$DEV" -q && "$D" resume-check --steps 6 --at 3 --resume-device "$DEV" -q; then
        pass "$l" "--device $DEV, and CPU checkpoints resumed on $DEV"
    else failed "$l" "resume-check --device / --resume-device $DEV"; fi
    l="4 fast mode differs"
    if $T $FAST --out "$tw/fast" --device "$DEV" --mode fast &&
        $T $FAST --out "$tw/det4" --device "$DEV" &&
        ! cmp -s "$tw/fast/trajectory.jsonl" "$tw/det4/trajectory.jsonl"; then
        pass "$l" "--mode fast on $DEV gives other bits than deterministic"
    else failed "$l" "--mode fast on $DEV gave the deterministic bits (or failed)"; fi
    l="4b train --bench --device $DEV"
    echo "-- 4b. train --bench --device $DEV $BENCH"
    if out=$("$D" train --bench --device "$DEV" $BENCH); then
        echo "$out" | sed 's/^/   /'
        # "... (goal <= 1.10x: met|missed)" lines: the figure without the
        # goal, the goal with its verdict ("missed" -> "NOT met")
        goals=$(echo "$out" | sed -n 's/.*(goal \(.*\))[^)]*$/\1/p' | sed 's/: *\(missed\|[Nn][Oo][Tt] met\)$/: NOT met/' |
            tr '\n' ';' | sed 's/;$//; s/;/; /g')
        fig=$(echo "$out" | grep -i -E 'tax|FLOP|peak|cuBLAS|unavailable' | sed 's/ *(goal [^)]*)[^)]*$//; s/^ *//; s/  */ /g' |
            tr '\n' ';' | sed 's/;$//; s/;/; /g')
        if [ -z "$goals" ]; then failed "$l" "no goal line in its output"
        elif twin_only; then skipped "$l" "ran on the twin; its figures mean nothing (${goals})"
        else
            case $out in *"cuBLAS FP32 (no TF32) unavailable"*) goals="$goals; the cuBLAS goal not judged (baseline unavailable)" ;; esac
            pass "$l" "$fig" "$goals"
        fi
        # the cuBLAS baselines, a row each (detcheck-train(1), --bench): FP32
        # (no TF32), the exact peer with its goal; TF32 on tensor cores, what
        # Hopper users run, a figure only. Unavailable: a SKIP saying why.
        for m in "cuBLAS FP32 (no TF32)" "cuBLAS TF32"; do
            line=$(echo "$out" | grep -F "$m " | head -n 1)
            case $line in
            "") failed "4b $m" "no '$m' line in train --bench's output" ;;
            *unavailable*) skipped "4b $m" "${line#"$m "}" ;;
            *) if twin_only; then skipped "4b $m" "ran on the twin: $line"
               else
                   g=$(echo "$line" | sed -n 's/.*(goal \(.*\))[^)]*$/\1/p' | sed 's/: *missed$/: NOT met/')
                   pass "4b $m" "$(echo "$line" | sed 's/ *(goal [^)]*)[^)]*$//; s/  */ /g')" "${g:-a figure, no goal}"
               fi ;;
            esac
        done
    else failed "$l" "train --bench --device $DEV failed"; fi
}

# 5. detcheck canary on the device (detcheck-canary(1)): its record equals the CPU
# golden written here, and one flipped bit is caught and named.
sec_5() {
    cw="$work/canary"
    mkdir -p "$cw"
    if ! "$D" canary --device cpu --write-golden "$cw/golden.json" > "$cw/cpu.txt" 2>&1; then
        sed 's/^/   /' "$cw/cpu.txt"
        failed "5 canary golden on the CPU" "writing the golden failed"; return
    fi
    t=$(secs)
    if "$D" canary --device "$DEV" --golden "$cw/golden.json" > "$cw/dev.txt" 2>&1; then
        pass "5 canary: $DEV record == CPU golden" "$(elapsed "$t") s"
    else sed 's/^/   /' "$cw/dev.txt"; failed "5 canary: $DEV record == CPU golden" "differs (or failed)"; fi
    "$D" canary --device "$DEV" --golden "$cw/golden.json" --inject 0:3:grad.blocks.0.mlp.fc.weight:5:9 \
        > "$cw/fault.txt" 2>&1
    rc=$?
    if [ $rc -eq 1 ] && grep -q "rank 0 $DEV:0 DIFFERS at step 3: grad.blocks.0.mlp.fc.weight" "$cw/fault.txt"; then
        pass "5 canary: injected bit flip named" "rank 0 $DEV:0, step 3, grad.blocks.0.mlp.fc.weight"
    else sed 's/^/   /' "$cw/fault.txt"; failed "5 canary: injected bit flip named" "exit $rc, or not named"; fi
    l="5 canary: 2 ranks on one device"
    if mpi_ok "$l"; then
        if mpirun --oversubscribe -np 2 "$D" canary --device "$DEV" --golden "$cw/golden.json" > "$cw/k2.txt" 2>&1; then
            pass "$l" "both == CPU golden"
        else sed 's/^/   /' "$cw/k2.txt"; failed "$l" "differs from the golden (or failed)"; fi
    fi
}

# 6. op tracing on the GPU
sec_6() {
    if gpu_only "6 op tracing (index_add_ / scatter_add_)" "its CPU twin: sh ci/gpu-check.sh cpu"; then
        if torch_cuda; then
            TPY=python3
            trace_checks cuda
        else skipped "6 op tracing (index_add_ / scatter_add_)" "no PyTorch with CUDA here"; fi
    fi
}

# 6. op tracing (detcheck-bisect(1), TRACE FILES) on DEV (cuda, or cpu: the twin). TPY: a python
# with torch; D: the detcheck binary; LIB: its library.
trace_checks() {
    dev=$1
    echo "== 6. op tracing on $dev: index_add_ / scatter_add_ localised, deterministic mode reproducible, cost"
    xw="$work/trace"
    mkdir -p "$xw"
    cat > "$xw/atomics.py" <<'PY'
"""Trains a small model that sums rows into buckets with index_add_ and then
scatter_add_ (atomicAdd on CUDA: the order of the float32 sums, so their
bits, may change from run to run), recorded with trace="ops".
  atomics.py OUT DEVICE DETERMINISTIC(0|1) STEPS [PLANT]
PLANT=1 (the CPU twin's test of the localisation): what run-to-run atomics
would do, planted: a dispatch mode entered below the Recorder's tracer adds
1e-3 to the first element of every index_add_ output, after the tracer took
the op's inputs and before it takes its output."""
import sys
import torch
import detcheck

out, device, det, steps = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
if sys.argv[5:] == ["1"]:
    from torch.utils._python_dispatch import TorchDispatchMode

    class Plant(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            r = func(*args, **(kwargs or {}))
            if func is torch.ops.aten.index_add_.default:
                r.view(-1)[0] += 1e-3
            return r

    Plant().__enter__()  # before the Recorder: its tracer's mode goes above this one
torch.use_deterministic_algorithms(det)
dev = torch.device(device)
# many rows into few buckets: thousands of atomic adds on each element
N, D, M = (1 << 18, 64, 16) if dev.type == "cuda" else (1 << 12, 16, 8)


class IndexPool(torch.nn.Module):
    def forward(self, h, idx):
        return torch.zeros(M, h.shape[1], device=h.device, dtype=h.dtype).index_add_(0, idx, h)


class ScatterPool(torch.nn.Module):
    def forward(self, h, idx):
        return torch.zeros(M, h.shape[1], device=h.device, dtype=h.dtype).scatter_add_(
            0, idx.unsqueeze(1).expand(-1, h.shape[1]), h)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(D, D)
        self.pool = IndexPool()
        self.spool = ScatterPool()
        self.out = torch.nn.Linear(D, D)

    def forward(self, x, idx):
        h = torch.tanh(self.inp(x))
        return self.out(self.pool(h, idx) + self.spool(h * 0.5, idx))


torch.manual_seed(0)
model = Net().to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator(device=dev).manual_seed(1)
with detcheck.Recorder(out, model=model, optimizer=opt, trace="ops") as rec:
    for step in range(steps):
        x = torch.randn(N, D, device=dev, generator=g)
        idx = torch.randint(0, M, (N,), device=dev, generator=g)
        y = torch.randn(M, D, device=dev, generator=g)
        loss = torch.nn.functional.mse_loss(model(x, idx), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        rec.step(step, loss=loss)
print("atomics.py: %d steps on %s, deterministic algorithms %s" % (steps, device, det))
PY
    # two runs of the script: NAME DET(0|1) [ENV=VALUE...]; sets brc (bisect's
    # exit); plant_b=1: run b plants a difference in index_add_ (the CPU twin)
    two_runs() {
        n=$1 det=$2
        shift 2
        brc=
        # the two runs at once (torch's start-up, seconds each, overlaps;
        # each process's sums are its own)
        pyrun env "$@" "$TPY" "$xw/atomics.py" "$xw/$n-a" "$dev" "$det" 3 0 > "$xw/$n-a.log" 2>&1 &
        pa=$!
        pyrun env "$@" "$TPY" "$xw/atomics.py" "$xw/$n-b" "$dev" "$det" 3 "${plant_b:-0}" > "$xw/$n-b.log" 2>&1 &
        pb=$!
        wait $pa
        ra=$?
        wait $pb
        rb=$?
        for r in a:$ra b:$rb; do
            [ "${r#*:}" = 0 ] && continue
            sed 's/^/   | /' "$xw/$n-${r%%:*}.log" | tail -n 15
            return 1
        done
        "$D" bisect "$xw/$n-a" "$xw/$n-b" > "$xw/$n.bisect" 2>&1
        brc=$?
        sed 's/^/   /' "$xw/$n.bisect" | head -n 20
        return 0
    }

    # the verdict on two runs with deterministic algorithms off: NAME LABEL
    # SAME_RESULT SAME_WHY (the row when they agree: SKIP or FAIL). A pass only
    # when bisect names index_add_ or scatter_add_ as the culprit (inputs
    # equal, output differs).
    localised() {
        culprit=$(grep -E '^first differing op: .*\((aten\.index_add|aten\.scatter_add)[^,]*, call [0-9]+\), output [0-9]+: inputs equal, output differs \(culprit\)' "$xw/$1.bisect" | head -n 1)
        case $brc in
        0) row "$3" "$2" "$4" ;;
        1)
            if [ -n "$culprit" ]; then
                pass "$2" "localised on $dev: ${culprit#first differing op: } ($(elapsed "$t") s)"
            else
                failed "$2" "the runs differ on $dev but bisect did not name index_add_ / scatter_add_ as the culprit (see the log)"
            fi
            ;;
        *) failed "$2" "detcheck bisect exited $brc on $dev (see the log)" ;;
        esac
    }

    # 6a. deterministic algorithms off: the atomics' op must be named
    echo "-- 6a. deterministic algorithms off: bisect must name index_add_ / scatter_add_"
    t=$(secs)
    plant_b=0
    if ! two_runs nondet 0; then
        failed "6a atomics" "the index_add_ / scatter_add_ script failed on $dev (deterministic algorithms off)"
    elif [ "$dev" = cuda ]; then
        localised nondet "6a atomics localised" SKIP "not reproduced: two runs with deterministic algorithms off agreed bit for bit on the GPU (bisect exit 0); nothing to localise, no localisation claimed"
    else
        localised nondet "6a atomics (CPU)" SKIP "no CUDA: nothing nondeterministic to localise (two CPU runs recorded and bisected: identical, as expected)"
        # the CPU twin tests the localisation itself on a planted difference
        echo "-- 6a (CPU twin). a planted difference in index_add_'s output (run b) must be named"
        t=$(secs)
        plant_b=1
        if ! two_runs planted 0; then
            failed "6a planted (CPU twin)" "the planted index_add_ script failed"
        else
            localised planted "6a planted (CPU twin)" FAIL "a planted index_add_ difference went unseen (bisect exit 0)"
        fi
    fi

    # 6b. deterministic algorithms on: the same script is reproducible
    echo "-- 6b. torch.use_deterministic_algorithms(True): bisect must find the runs identical"
    t=$(secs)
    plant_b=0
    if ! two_runs det 1 CUBLAS_WORKSPACE_CONFIG=:4096:8; then
        failed "6b deterministic mode" "the index_add_ / scatter_add_ script failed on $dev with deterministic algorithms on"
    else
        case $brc in
        0) pass "6b deterministic mode" "two runs reproducible on $dev, every op identical (bisect exit 0, $(elapsed "$t") s)" ;;
        1) failed "6b deterministic mode" "deterministic algorithms on, yet the two runs on $dev differ (see the log)" ;;
        *) failed "6b deterministic mode" "detcheck bisect exited $brc on $dev (see the log)" ;;
        esac
    fi

    # 6c. the cost of module tracing: the 1B model of 3b on CUDA; a small one on the CPU twin
    if [ "$dev" = cuda ]; then
        echo "-- 6c. module tracing, every step, ~1B parameters (bench/recorder_cost.py --tracing)"
        set -- --device cuda --width 8192 --layers 15 --batch 8192 --rounds 2 --goal-modules 0.05
        what="1B params, CUDA, wall time" goal="< 5%"
    else
        echo "-- 6c. module tracing, every step, CPU twin at 17M parameters (bench/recorder_cost.py --tracing)"
        set -- --device cpu --width 2048 --layers 4 --batch 256 --rounds 3
        what="CPU twin, 17M params, CPU time" goal="< 15%"
    fi
    out=$(pyrun "$TPY" bench/recorder_cost.py --tracing \
        --variants none,modules "$@" 2> "$xw/cost.err")
    rc=$?
    echo "$out" | sed 's/^/   /'
    g=$(echo "$out" | sed -n 's/^goal modules *//p')
    case $rc in
    0) pass "6c module tracing cost" "$what: $g" "$goal: met" ;;
    3) pass "6c module tracing cost" "$what: $g" "$goal: NOT met" ;;
    *) tail -n 5 "$xw/cost.err" | sed 's/^/   | /'
       failed "6c module tracing cost" "bench/recorder_cost.py exit $rc" ;;
    esac
}

# The summary table, from $RES; sets the exit status: 1 a FAIL, else 3 a
# goal NOT met, else 0.
summary() { # TITLE
    echo
    echo "== summary: $1"
    awk -F '\t' '
        { n++; s[n] = $1; r[n] = $2; f[n] = $3; g[n] = $4; if (length($1) > w) w = length($1)
          c[$2]++ }
        END {
            printf "%-*s | %-4s | %s | %s\n", w, "section", "", "figure", "goal"
            for (i = 1; i <= n; i++) printf "%-*s | %-4s | %s | %s\n", w, s[i], r[i], f[i], g[i]
            printf "%d PASS, %d FAIL, %d SKIP\n", c["PASS"], c["FAIL"], c["SKIP"]
        }' "$RES"
    if cut -f 2 "$RES" | grep -qx FAIL; then return 1; fi
    if cut -f 4 "$RES" | grep -q "NOT met"; then return 3; fi
    return 0
}

# The sections' limits and estimates (TIME above): section (0: the probe),
# limit (s), GPU-only seconds (what `run` does on the GPU host beyond what the
# twin mode does here). One table: run_section takes its limits from it and
# `sh ci/gpu-check.sh estimate TIMES` checks the estimate against it.
SECTIONS='0 60 3
1 80 45
2 30 12
3 100 75
4 90 62
5 20 5
6 45 32'
limit_of() { echo "$SECTIONS" | awk -v n="$1" '$1 == n {print $2}'; }

# The estimate of a passing `run` on the GPU host from a twin run's times
# here (TIMES: $OUT/gpu-check-times.tsv; section, limit, wall s, CPU s): each
# section's CPU seconds here (its processes' user + sys, load-independent;
# an upper bound of their wall time on the host, run in turn on cores no
# slower, the twin's kernels included though a GPU runs them) plus its
# GPU-only seconds. Exit 1 when a section's estimate exceeds its limit or
# their sum the whole budget.
estimate() { # TIMES
    [ -r "$1" ] || { echo "gpu-check estimate: cannot read $1"; exit 2; }
    echo "$SECTIONS" | awk -v budget="${DCK_GPU_CHECK_BUDGET:-290}" '
        NR == FNR { cpu[$1] = $4; next }
        {   here = ($1 in cpu && cpu[$1] != "-") ? cpu[$1] : 0
            est = here + $3; sum += est
            over = est > $2
            printf "%-7s | %9s | %8.1f | %8.1f | %5d | %s\n", ($1 == 0 ? "probe" : $1),
                ($1 in cpu ? sprintf("%.2f", here) : "not run"), $3, est, $2, over ? "OVER" : "ok"
            bad += over }
        BEGIN { printf "%-7s | %9s | %8s | %8s | %5s |\n", "section", "CPU s here", "GPU-only", "estimate", "limit" }
        END { printf "whole run: estimate %.1f s, budget %d s: %s\n", sum, budget, (sum > budget ? "OVER" : "ok")
              exit (bad || sum > budget) }' "$1" -
}

# run_section N TITLE: sec_N in its own process under timeout(1), within its
# limit (SECTIONS) and the whole run's budget; a section that dies or times
# out is a FAIL.
run_section() {
    n=$1 lim=$(limit_of "$1")
    set -- "$1" "$lim" "$2"
    case " ${DCK_GPU_CHECK_SECTIONS:-1 2 3 4 5 6} " in *" $n "*) ;; *) return 0 ;; esac
    left=$(awk -v e="$deadline" -v now="$(secs)" 'BEGIN {printf "%d", e - now}')
    if [ "$left" -lt 5 ]; then
        skipped "$n $3" "not run: the whole run's budget (${DCK_GPU_CHECK_BUDGET:-290} s) is spent"
        return 0
    fi
    [ "$lim" -gt "$left" ] && lim=$left
    echo "== $n. $3 (limit $lim s)"
    if [ -n "$GPU_BROKEN" ]; then
        skipped "$n $3" "not run: $GPU_BROKEN"
        return 0
    fi
    t=$(secs)
    before=$(wc -l < "$RES")
    timeout -k 5 "$lim" sh "$self" __section "$n"
    rc=$?
    after=$(wc -l < "$RES")
    # section, limit, wall s, CPU s of its processes (user + sys, from the
    # section's shell: `times`), for the estimate's test (TIME above)
    printf '%s\t%s\t%s\t%s\n' "$n" "$2" "$(elapsed "$t")" "$(cat "$work/cpu-$n" 2> /dev/null || echo -)" >> "$work/times.tsv"
    case $rc in
    0) [ "$after" -gt "$before" ] || failed "$n $3" "the section recorded no result" ;;
    124 | 137) failed "$n $3" "timed out after $lim s (its checks before the limit are above)" ;;
    *) failed "$n $3" "the section's shell exited $rc" ;;
    esac
    echo "   ($n: $(elapsed "$t") s)"
}

# The CPU twin of section 6 (op tracing), from an ordinary build.
cpu_checks() {
    [ -x "$B/detcheck" ] && [ -e "$B/libdetcheck.so.0" ] ||
        { echo "gpu-check cpu: no $B/detcheck or $B/libdetcheck.so.0: make BUILD=$B all (or B=...)"; exit 2; }
    D="$BA/detcheck" LIB="$BA/libdetcheck.so.0" PYLIBS=""
    TPY=${DCK_TORCH_PYTHON:-$(sh ci/venv.sh torch 2> /dev/null)}
    if [ -z "$TPY" ] || ! "$TPY" -c "import torch" 2> /dev/null; then
        echo "gpu-check cpu: skipped: no python3 with torch (DCK_TORCH_PYTHON; ci/venv.sh torch)"
        exit 77
    fi
    work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-cpu.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    RES=$work/results.tsv
    : > "$RES"
    echo "== CPU twin of ci/gpu-check.sh (section 6), $B, $("$TPY" -c 'import torch; print("torch", torch.__version__)')"
    trace_checks cpu
    summary "CPU twin of section 6"
    exit $?
}

# The probe and the setup shared by the sections (exported to them).
run_checks() {
    [ -x "$B/detcheck" ] || { echo "gpu-check run: no $B/detcheck: run 'sh ci/gpu-check.sh build' first"; exit 2; }
    work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    RES=$work/results.tsv
    : > "$RES"
    start=$(secs)
    deadline=$(awk -v s="$start" -v b="${DCK_GPU_CHECK_BUDGET:-290}" 'BEGIN {printf "%d", s + b}')
    if [ "$TWIN" = 1 ]; then
        nd="" DEV=twin HASHDEV=cpu
        SMALL="--preset small --layers 1 --width 96 --heads 2 --seq 16 --vocab 512 --microbatches 2 --digest-every 2"
        FAST="--steps 3 --batch 2"
        BENCH="--steps 2"
    else
        nd=$(nccl_dir)
        DEV=cuda HASHDEV=cuda
        # GPT-2 small's shapes (width 768, 12 heads, the 50257-token head)
        # in 2 of its 12 layers (92M parameters, 1.1 GB checkpoints), 8
        # microbatches of 16 tokens (the CPU reference's threads work on
        # microbatches: 8 of the host's cores), the root at the last step
        # (loss and grad norm at both); see TIME above
        SMALL="--preset small --layers 2 --seq 16 --microbatches 8 --digest-every 2"
        FAST="--steps 12 --batch 4"
        # 9 runs (3 rounds x deterministic, fast, fast on cuBLAS), each
        # initialising its model on the host: GPT-2 small's shapes in 2 layers
        BENCH="--preset small --layers 2 --seq 128 --batch 4 --microbatches 2 --steps 2"
    fi
    # the libraries, per command (see LIBRARIES above)
    LIBPATH="$BA/lib${nd:+:$nd}"
    mkdir -p "$work/lib-deb" "$work/bin"
    for f in "$BA"/lib/*; do
        [ -e "$f" ] || continue
        case $(basename "$f") in libcudart*) ;; *) ln -s "$f" "$work/lib-deb/" ;; esac
    done
    PYLIBS=$work/lib-deb
    cudart=$(ls "$BA"/lib/libcudart.so.* 2> /dev/null | head -n 1)
    [ -n "$cudart" ] && { DETCHECK_CUDART_LIB=${DETCHECK_CUDART_LIB:-$(basename "$cudart")}; export DETCHECK_CUDART_LIB; }
    # the soname, not a path: a torch process reuses the NCCL torch loaded;
    # detcheck and the tests/gpu programs find it in LIBPATH
    [ -n "$nd" ] && { DETCHECK_NCCL_LIB=${DETCHECK_NCCL_LIB:-libnccl.so.2}; export DETCHECK_NCCL_LIB; }
    # cuBLAS and cuBLASLt are too big to carry (600 MB): the finder looks
    # in the NVIDIA wheels of the image's python (its site-packages step)
    sp=$(python3 -c 'import site; print(":".join(site.getsitepackages() + [site.getusersitepackages()]))' 2> /dev/null)
    [ -n "$sp" ] && { DETCHECK_SITE_PACKAGES=${DETCHECK_SITE_PACKAGES:+$DETCHECK_SITE_PACKAGES:}$sp; export DETCHECK_SITE_PACKAGES; }
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
        "$LIBPATH" "$BA/detcheck" > "$work/bin/detcheck"
    chmod +x "$work/bin/detcheck"
    D="$work/bin/detcheck" LIB="$BA/libdetcheck.so.0"
    # multi-rank checks: mpirun and the Open MPI runtime detcheck loads
    # (dlopen: libmpi.so.40, or DETCHECK_MPI_LIB), with its plugins
    MPI_MISSING=
    mpi_lib=${DETCHECK_MPI_LIB:-$(readlink -f /usr/lib/x86_64-linux-gnu/libmpi.so.40 2> /dev/null)}
    if [ -n "${DCK_NO_MPI_TESTS:-}" ]; then
        MPI_MISSING="DCK_NO_MPI_TESTS is set ($DCK_NO_MPI_TESTS)"
    elif ! command -v mpirun > /dev/null; then
        MPI_MISSING="no mpirun on this machine"
    elif [ -z "$mpi_lib" ] || [ ! -e "$mpi_lib" ] || [ ! -d "$(dirname "$mpi_lib")/openmpi" ]; then
        MPI_MISSING="no Open MPI runtime matching the build (libmpi.so.40 with its openmpi/ plugins: ${mpi_lib:-none})"
    fi
    GPU_BROKEN=
    export top self B BA TWIN work RES D LIB LIBPATH PYLIBS DEV HASHDEV SMALL BENCH FAST MPI_MISSING GPU_BROKEN

    echo "== machine ($([ "$TWIN" = 1 ] && echo "twin mode: --device twin, no GPU needed" || echo GPU))"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2> /dev/null ||
        echo "(no nvidia-smi)"
    echo "nproc $(nproc), NCCL from: ${nd:-not found}, mpirun: ${MPI_MISSING:-yes}"
    if dl ldd "$B/detcheck" | grep -q "not found"; then
        dl ldd "$B/detcheck" | grep "not found"
        echo "gpu-check: shared libraries missing on this machine (see above)"
        exit 2
    fi
    # cudart and NCCL are loaded on the first GPU call, never linked
    if dl ldd "$B/detcheck" | grep -E "libcudart|libnccl"; then
        failed "0 detcheck links neither cudart nor NCCL" "it links one of them (they must be loaded only for a GPU path)"
    else pass "0 detcheck links neither cudart nor NCCL" "loaded on the first GPU call"; fi
    # the probe: hash a one-tensor safetensors file on the device (in twin
    # mode the CPU path stands in, so that the probe command itself is tested)
    python3 -c 'import json, struct, sys
h = json.dumps({"probe": {"dtype": "U8", "shape": [5], "data_offsets": [0, 5]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"probe")' "$work/probe.safetensors"
    gpu=$(timeout "$(limit_of 0)" "$D" hash --device "$HASHDEV" "$work/probe.safetensors" 2>&1 > /dev/null)
    rc=$?
    if [ "$TWIN" = 1 ]; then
        if [ $rc -eq 0 ]; then
            skipped "0 GPU probe" "twin mode: the GPU paths run by their CPU twin (--device twin); the probe command ran with the CPU path"
        else failed "0 GPU probe" "the probe command fails even on the CPU path (exit $rc): $(echo "$gpu" | head -n 1)"; fi
    else
        # exit 77 only for "no device" when nvidia-smi sees none either; a
        # loader failure (cudart or NCCL not loadable, a function missing, a
        # build without CUDA) or any other error is a FAIL here, and every
        # section a SKIP naming it
        why=
        case $rc:$gpu in
        0:*) pass "0 GPU probe" "hash --device cuda runs" ;;
        *"cannot load"* | *"too old for this detcheck"* | *"built without CUDA"*) why="loader" ;;
        *"no CUDA device"*)
            if nvidia-smi -L 2> /dev/null | grep -q '^GPU'; then why="nvidia-smi lists a GPU, yet"
            else
                echo "gpu-check: skipped: $gpu"
                exit 77
            fi ;;
        *) why="exit $rc" ;;
        esac
        if [ -n "$why" ]; then
            GPU_BROKEN="the GPU probe failed (see 0 GPU probe)"
            failed "0 GPU probe" "$why: $(echo "$gpu" | head -n 2 | tr '\n' ' ')"
        fi
    fi
    export GPU_BROKEN deadline
    run_section 1 "CUDA suite and examples"
    run_section 2 "hash --device $HASHDEV against the CPU path"
    run_section 3 "benchmarks"
    run_section 4 "train --device $DEV against the CPU"
    run_section 5 "canary --device $DEV against a CPU golden"
    run_section 6 "op tracing"
    [ -n "${OUT:-}" ] && cp "$work/times.tsv" "$OUT/gpu-check-times.tsv" 2> /dev/null
    summary "$([ "$TWIN" = 1 ] && echo "twin mode (--device twin; B=$B)" || echo "GPU (B=$B)"), $(elapsed "$start") s"
    exit $?
}

main() {
    case $phase in
    build) build ;;
    run) run_checks ;;
    cpu) cpu_checks ;;
    estimate) estimate "$times_file" ;;
    all)
        [ -x "$B/detcheck" ] || build
        run_checks
        ;;
    *) echo "usage: ci/gpu-check.sh [build|run|cpu|twin|estimate TIMES]"; exit 2 ;;
    esac
}

# a section, in its own process (run_section): the environment carries the setup
if [ "$phase" = __section ]; then
    cd "$top" || exit 2
    # test hook (tests/cli/test_gpu_check_twin.sh): section N hangs, so the
    # limits are tested without depending on how fast the machine is
    [ "${DCK_GPU_CHECK_STALL:-}" = "$2" ] && sleep 100000
    "sec_$2"
    # the CPU seconds of the section's processes (children's user + sys)
    # (into a file first: `times` in a pipeline runs in a subshell, which has no children)
    times > "$work/cpu-$2.raw"
    awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] }
                   printf "%.2f\n", s }' "$work/cpu-$2.raw" > "$work/cpu-$2"
    exit 0
fi

log=${OUT:-${TMPDIR:-/tmp}}/gpu-check.log
rcfile=$(mktemp "${TMPDIR:-/tmp}/gpu-check-rc.XXXXXX")
( (main); echo $? > "$rcfile" ) 2>&1 | tee "$log"
rc=$(cat "$rcfile")
rm -f "$rcfile"
exit "${rc:-1}"

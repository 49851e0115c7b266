#!/bin/sh
# ci/gpu-check.sh: the GPU check of detcheck. Under 5 minutes on one H200.
#
#   1. the CUDA test suite (tests/gpu/check_cuda): GPU digests bit-equal to
#      the CPU digest for every dtype, every length 0..64 KiB and the lengths
#      around every segment edge up to 1 MiB (at rotating misalignments),
#      random fragment offsets (GPU and CPU partials mixed), 8 GiB tensors;
#      the C example (examples/gpu_hash.c) and, when PyTorch is there, the
#      ctypes example on live CUDA tensors (examples/torch_cuda_hash.py --check)
#   2. `detcheck hash --device cuda` against the CPU path: identical manifests
#      (a small mixed checkpoint, the CLI tests, a 4 GiB file)
#   3. the benchmark, in one run: digest throughput over an 8 GiB device
#      buffer vs a kernel that only reads it as 64-bit words (goal >= 0.8);
#      and `hash --device cuda` vs the CPU path on a 4 GiB file in the page
#      cache.
#      3b. detcheck.Recorder's per-step digests of a 1B-parameter model's
#      parameters and gradients vs its AdamW step (bench/recorder_cost.py,
#      goal <= 2%; issue 14), when PyTorch with CUDA is there.
#   4. the trainer on the GPU (issue 12): `train --device cuda` == CPU at
#      every step (fp32, bf16; tiny and shortened small presets), 2 and 4 ranks on
#      one GPU, resumes across devices, fast mode differs, `train --bench`.
#      (the small preset's CPU reference: about 15 s per run on 16 cores)
#   5. detcheck canary on the GPU (issue 13): record == the CPU golden, an
#      injected bit flip is caught and named, 2 ranks on one GPU.
#   and, when PyTorch with CUDA is there, the Python package's digests of live
#   CUDA tensors (python/tests/test_digest.py -k cuda, issue 14).
#   6. op tracing on the GPU (issue 20), when PyTorch with CUDA is there: a
#      model summing rows into buckets with index_add_ and scatter_add_
#      (atomicAdd on CUDA) trained twice, recorded with trace="ops":
#      6a. with torch.use_deterministic_algorithms(False), `detcheck bisect`
#          must name that op ("first differing op: ... aten.index_add_...
#          inputs equal, output differs (culprit)"); when the two runs happen
#          to agree this is a SKIP ("not reproduced"), never a PASS;
#      6b. with torch.use_deterministic_algorithms(True) (and
#          CUBLAS_WORKSPACE_CONFIG=:4096:8) the same script is reproducible:
#          bisect exits 0;
#      6c. the cost of module tracing, every step, on the 1B model of 3b
#          (bench/recorder_cost.py --tracing: plain, trace="none" and
#          trace="modules" alternated; (T_modules - T_none) / T_plain in
#          synchronized wall time, goal < 5%).
#
# The GPU machine may have no package registry and not the -dev libraries
# detcheck builds against, so the check has two phases:
#
#   sh ci/gpu-check.sh build   on a development machine (nvcc + the -dev
#                              packages; CUDA 13, sm_90): builds $B (default
#                              build-gpucheck/) with CUDA: library, CLI,
#                              tests/gpu programs; copies the shared libraries
#                              they load (xxhash, zstd, yaml, jansson, Open MPI,
#                              ...) into $B/lib, and cudart, which detcheck
#                              loads with dlopen on its first GPU call (ldd
#                              does not list it), leaving out glibc,
#                              libstdc++, the driver and NCCL (218 MB, also
#                              dlopen'ed; the GPU machine has its own, found
#                              at run time through LD_LIBRARY_PATH).
#   sh ci/gpu-check.sh run     on the GPU machine, from the carried $B: runs
#                              1-3 with LD_LIBRARY_PATH=$B/lib (+ NCCL's dir).
#   sh ci/gpu-check.sh         both, on a machine that has everything.
#   sh ci/gpu-check.sh cpu     the CPU twin of the sections that have one, on
#                              any machine, from an ordinary build $B (here
#                              B defaults to build): section 6 on --device
#                              cpu at small sizes, with the torch of
#                              DCK_TORCH_PYTHON or ci/venv.sh torch. No atomics
#                              on the CPU: 6a still records and bisects two
#                              runs but reports a SKIP ("no CUDA: nothing
#                              nondeterministic to localise") unless they
#                              differ; 6b and 6c run as on the GPU (6c with the
#                              CPU goal, < 15%, and CPU time). Tests the
#                              section's logic without a GPU.
#
# With the device tool of this workspace: `sh ci/gpu-check.sh build` here,
# then one call: run(command="sh ci/gpu-check.sh run", carry=["build-gpucheck"]).
# The log is also written to $OUT/gpu-check.log when $OUT is set.
# Exit: 0 all passed and the goal met; 1 a test failed; 3 only the speed
# goal missed; 77 no GPU (nothing run, says why).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
phase=${1:-all}
if [ "$phase" = cpu ]; then B=${B:-build}; else B=${B:-build-gpucheck}; fi
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

results=""
status=0
note() { results="$results
$*"; }
pass() { note "PASS  $*"; }
failed() { note "FAIL  $*"; status=1; }
secs() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(secs)" 'BEGIN {printf "%.2f", b - a}'; }

# 5. detcheck canary on the GPU (issue 13): the GPU's record equals the CPU
# golden written here, and one flipped bit in the GPU run is caught and named.
canary_checks() {
    echo "== 5. canary --device cuda against a CPU golden"
    cw="$work/canary"
    mkdir -p "$cw"
    if ! "$D" canary --device cpu --write-golden "$cw/golden.json" > "$cw/cpu.txt" 2>&1; then
        failed "canary on the CPU (writing the golden)"; return
    fi
    t=$(secs)
    if "$D" canary --device cuda --golden "$cw/golden.json" > "$cw/gpu.txt" 2>&1; then
        pass "canary: GPU record == CPU golden ($(elapsed "$t") s)"
    else sed 's/^/   /' "$cw/gpu.txt"; failed "canary: the GPU differs from the CPU golden (or failed)"; fi
    "$D" canary --device cuda --golden "$cw/golden.json" --inject 0:3:grad.blocks.0.mlp.fc.weight:5:9 \
        > "$cw/fault.txt" 2>&1
    rc=$?
    if [ $rc -eq 1 ] && grep -q 'rank 0 cuda:0 DIFFERS at step 3: grad.blocks.0.mlp.fc.weight' "$cw/fault.txt"; then
        pass "canary: a flipped bit on the GPU is caught and named"
    else sed 's/^/   /' "$cw/fault.txt"; failed "canary: injected fault on the GPU (exit $rc)"; fi
    if command -v mpirun > /dev/null &&
        timeout 120 mpirun --oversubscribe -np 2 "$D" canary --device cuda --golden "$cw/golden.json" \
            > "$cw/k2.txt" 2>&1; then
        pass "canary: 2 ranks on the GPU == CPU golden"
    else sed 's/^/   /' "$cw/k2.txt" 2> /dev/null; failed "canary: 2 ranks on the GPU"; fi
}

# 4. the trainer on the GPU (issue 12): its trajectory == the CPU's at every
# step (loss, grad norm, root bits) for fp32 and bf16, tiny and (shortened)
# small presets; 2 ranks sharing the GPU == 1 rank; checkpoints CPU -> GPU and
# GPU -> CPU; resume-check on the GPU; fast mode differs; the benchmark
# (determinism tax, linear layers' FLOP/s against a plain FMA kernel).
train_checks() {
    echo "== 4. train --device cuda against the CPU"
    tw="$work/train"
    mkdir -p "$tw"
    T="$D train -q"
    same_traj() { # name, flags...: CPU run == GPU run, every step
        n=$1
        shift
        t=$(secs)
        if $T "$@" --out "$tw/$n-cpu" --threads "$(nproc)" && $T "$@" --out "$tw/$n-gpu" --device cuda &&
            cmp "$tw/$n-cpu/trajectory.jsonl" "$tw/$n-gpu/trajectory.jsonl" &&
            "$D" verify --golden "$tw/$n-cpu/step_$(printf %08d "$steps")/manifest.json" \
                "$tw/$n-gpu/step_$(printf %08d "$steps")" > /dev/null; then
            pass "train $n: GPU trajectory and checkpoint == CPU ($(elapsed "$t") s)"
        else failed "train $n: GPU differs from the CPU (or a run failed)"; fi
    }
    # stage by stage first, so that a difference is named (activations,
    # loss, each parameter's gradient, norm, AdamW)
    t=$(secs)
    if timeout 120 "$B/tests/gpu/check_train_gpu"; then
        pass "trainer kernels: GPU == CPU twin stage by stage ($(elapsed "$t") s)"
    else failed "trainer kernels: GPU differs from the CPU twin (tests/gpu/check_train_gpu)"; fi
    steps=12
    same_traj tiny-fp32 --steps 12
    same_traj tiny-bf16 --steps 12 --precision bf16
    same_traj tiny-b4 --steps 12 --batch 4 --microbatches 4 --precision bf16
    steps=2
    same_traj small-fp32 --preset small --seq 64 --microbatches 2 --steps 2
    same_traj small-bf16 --preset small --seq 64 --microbatches 2 --steps 2 --precision bf16
    if [ -z "${DCK_NO_MPI_TESTS:-}" ] && command -v mpirun > /dev/null; then
        if timeout 120 mpirun --oversubscribe -np 2 $T --steps 12 --out "$tw/k2" --device cuda &&
            cmp "$tw/tiny-fp32-cpu/trajectory.jsonl" "$tw/k2/trajectory.jsonl"; then
            pass "train: 2 ranks on one GPU == 1 rank"
        else failed "train: 2 ranks on one GPU differ from 1 rank"; fi
        if timeout 120 mpirun --oversubscribe -np 4 $T --steps 12 --out "$tw/k4" --device cuda &&
            cmp "$tw/tiny-fp32-cpu/trajectory.jsonl" "$tw/k4/trajectory.jsonl"; then
            pass "train: 4 ranks on one GPU == 1 rank"
        else failed "train: 4 ranks on one GPU differ from 1 rank"; fi
    fi
    if $T --steps 6 --out "$tw/c2g" && $T --steps 12 --out "$tw/c2g" --resume --device cuda &&
        cmp "$tw/tiny-fp32-cpu/trajectory.jsonl" "$tw/c2g/trajectory.jsonl" &&
        $T --steps 6 --out "$tw/g2c" --device cuda && $T --steps 12 --out "$tw/g2c" --resume &&
        cmp "$tw/tiny-fp32-cpu/trajectory.jsonl" "$tw/g2c/trajectory.jsonl"; then
        pass "train: CPU -> GPU and GPU -> CPU resume reproduce the trajectory"
    else failed "train: a resume across devices differs"; fi
    if "$D" resume-check --steps 6 --at 3 --device cuda -q && "$D" resume-check --steps 6 --at 3 --resume-device cuda -q; then
        pass "resume-check --device cuda, and CPU checkpoints resumed on the GPU"
    else failed "resume-check on the GPU"; fi
    if $T --steps 12 --out "$tw/fast" --device cuda --mode fast --batch 4 &&
        $T --steps 12 --out "$tw/det4" --device cuda --batch 4 &&
        ! cmp -s "$tw/fast/trajectory.jsonl" "$tw/det4/trajectory.jsonl"; then
        pass "train --mode fast on the GPU differs from deterministic"
    else failed "train --mode fast on the GPU gave the deterministic bits (or failed)"; fi
    echo "== 4b. train --bench --device cuda (small preset, 4 x 256 tokens per microbatch)"
    if out=$("$D" train --bench --device cuda --preset small --seq 256 --batch 4 --microbatches 2 --steps 3); then
        echo "$out" | sed 's/^/   /'
        note "INFO  train --bench --device cuda: $(echo "$out" | grep -E 'tax|peak' | tr '\n' ' ')"
        case $out in
        *"goal <= 1.10x: met"*"goal >= 25%: met"*) pass "train benchmark goals met" ;;
        *) note "GOAL  train benchmark: a goal missed (see above)"; [ $status -eq 0 ] && status=3 ;;
        esac
    else failed "train --bench --device cuda"; fi
}

# 6. op tracing (issue 20) on DEV (cuda, or cpu: the twin). TPY: a python
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
        for r in a b; do
            p=0
            [ "$r" = b ] && p=${plant_b:-0}
            if ! env "$@" DETCHECK_LIB="$LIB" PYTHONPATH=python/src timeout 180 "$TPY" "$xw/atomics.py" \
                "$xw/$n-$r" "$dev" "$det" 3 "$p" > "$xw/$n-$r.log" 2>&1; then
                sed 's/^/   | /' "$xw/$n-$r.log" | tail -n 15
                return 1
            fi
        done
        "$D" bisect "$xw/$n-a" "$xw/$n-b" > "$xw/$n.bisect" 2>&1
        brc=$?
        sed 's/^/   /' "$xw/$n.bisect" | head -n 20
        return 0
    }

    # the verdict on two runs with deterministic algorithms off: NAME LABEL
    # WHEN_SAME (the note when they agree). A pass only when bisect names
    # index_add_ or scatter_add_ as the culprit (inputs equal, output differs).
    localised() {
        culprit=$(grep -E '^first differing op: .*\((aten\.index_add|aten\.scatter_add)[^,]*, call [0-9]+\), output [0-9]+: inputs equal, output differs \(culprit\)' "$xw/$1.bisect" | head -n 1)
        case $brc in
        0) note "$3" ;;
        1)
            if [ -n "$culprit" ]; then
                pass "$2 localised on $dev: ${culprit#first differing op: } ($(elapsed "$t") s)"
            else
                failed "$2: the runs differ on $dev but bisect did not name index_add_ / scatter_add_ as the culprit (see above)"
            fi
            ;;
        *) failed "$2: detcheck bisect exited $brc on $dev (see above)" ;;
        esac
    }

    # 6a. deterministic algorithms off: the atomics' op must be named
    echo "-- 6a. deterministic algorithms off: bisect must name index_add_ / scatter_add_"
    t=$(secs)
    plant_b=0
    if ! two_runs nondet 0; then
        failed "6a. the index_add_ / scatter_add_ script failed on $dev (deterministic algorithms off)"
    elif [ "$dev" = cuda ]; then
        localised nondet "6a. atomics" "SKIP  6a. not reproduced: two runs with deterministic algorithms off agreed bit for bit on the GPU (bisect exit 0); nothing to localise, no localisation claimed"
    else
        localised nondet "6a. atomics (CPU)" "SKIP  6a. no CUDA: nothing nondeterministic to localise (two CPU runs recorded and bisected: identical, as expected)"
        # the CPU twin tests the localisation itself on a planted difference
        echo "-- 6a (CPU twin). a planted difference in index_add_'s output (run b) must be named"
        t=$(secs)
        plant_b=1
        if ! two_runs planted 0; then
            failed "6a (CPU twin). the planted index_add_ script failed"
        else
            localised planted "6a (CPU twin). planted index_add_ difference" \
                "FAIL  6a (CPU twin). a planted index_add_ difference went unseen (bisect exit 0)"
            [ "$brc" = 0 ] && status=1
        fi
    fi

    # 6b. deterministic algorithms on: the same script is reproducible
    echo "-- 6b. torch.use_deterministic_algorithms(True): bisect must find the runs identical"
    t=$(secs)
    plant_b=0
    if ! two_runs det 1 CUBLAS_WORKSPACE_CONFIG=:4096:8; then
        failed "6b. the index_add_ / scatter_add_ script failed on $dev with deterministic algorithms on"
    else
        case $brc in
        0) pass "6b. deterministic algorithms on: two runs reproducible on $dev, every op identical (bisect exit 0, $(elapsed "$t") s)" ;;
        1) failed "6b. deterministic algorithms on, yet the two runs on $dev differ (see above)" ;;
        *) failed "6b. detcheck bisect exited $brc on $dev (see above)" ;;
        esac
    fi

    # 6c. the cost of module tracing: the 1B model of 3b on CUDA; a small one on the CPU twin
    if [ "$dev" = cuda ]; then
        echo "-- 6c. module tracing, every step, ~1B parameters (bench/recorder_cost.py --tracing)"
        set -- --device cuda --width 8192 --layers 15 --batch 8192 --rounds 3 --goal-modules 0.05
        what="1B params, CUDA, wall time"
    else
        echo "-- 6c. module tracing, every step, CPU twin at 17M parameters (bench/recorder_cost.py --tracing)"
        set -- --device cpu --width 2048 --layers 4 --batch 256 --rounds 3
        what="CPU twin, 17M params, CPU time"
    fi
    out=$(DETCHECK_LIB="$LIB" PYTHONPATH=python/src timeout 300 "$TPY" bench/recorder_cost.py --tracing \
        --variants none,modules "$@" 2> "$xw/cost.err")
    rc=$?
    echo "$out" | sed 's/^/   /'
    g=$(echo "$out" | sed -n 's/^goal modules *//p')
    case $rc in
    0) pass "6c. module tracing ($what): $g" ;;
    3) note "GOAL  6c. module tracing ($what): $g"
       [ $status -eq 0 ] && status=3 ;;
    *) tail -n 5 "$xw/cost.err" | sed 's/^/   | /'
       failed "6c. module tracing cost (bench/recorder_cost.py exit $rc)" ;;
    esac
}

# The CPU twin: section 6 on --device cpu, from an ordinary build.
cpu_checks() {
    [ -x "$B/detcheck" ] && [ -e "$B/libdetcheck.so.0" ] ||
        { echo "gpu-check cpu: no $B/detcheck or $B/libdetcheck.so.0: make BUILD=$B all (or B=...)"; exit 2; }
    D="$top/$B/detcheck" LIB="$top/$B/libdetcheck.so.0"
    TPY=${DCK_TORCH_PYTHON:-$(sh ci/venv.sh torch 2> /dev/null)}
    if [ -z "$TPY" ] || ! "$TPY" -c "import torch" 2> /dev/null; then
        echo "gpu-check cpu: skipped: no python3 with torch (DCK_TORCH_PYTHON; ci/venv.sh torch)"
        exit 77
    fi
    work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check-cpu.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    echo "== CPU twin of ci/gpu-check.sh (section 6), $B, $("$TPY" -c 'import torch; print("torch", torch.__version__)')"
    trace_checks cpu
    echo
    echo "== summary (CPU twin)$results"
    exit $status
}

run_checks() {
    [ -x "$B/detcheck" ] || { echo "gpu-check run: no $B/detcheck: run 'sh ci/gpu-check.sh build' first"; exit 2; }
    nd=$(nccl_dir)
    LD_LIBRARY_PATH="$top/$B/lib${nd:+:$nd}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
    echo "== machine"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null ||
        echo "(no nvidia-smi)"
    echo "nproc $(nproc), NCCL from: ${nd:-not found}"
    if ldd "$B/detcheck" | grep -q "not found"; then
        ldd "$B/detcheck" | grep "not found"
        echo "gpu-check: shared libraries missing on this machine (see above)"
        exit 2
    fi
    # cudart and NCCL are loaded on the first GPU call, never linked
    if ldd "$B/detcheck" | grep -E "libcudart|libnccl"; then
        failed "detcheck links cudart or NCCL (they must be loaded only for a GPU path)"
    else pass "detcheck links neither cudart nor NCCL (loaded on the first GPU call)"; fi
    D="$top/$B/detcheck"
    gpu=$("$D" hash --device cuda "$top/$B/gpu-probe-none" 2>&1)
    case $gpu in *"no CUDA device"*)
        echo "gpu-check: skipped: $gpu"
        exit 77 ;;
    esac
    work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
    trap 'rm -rf "$work"' EXIT

    echo "== 1. CUDA test suite"
    t=$(secs)
    if timeout 240 "$B/tests/gpu/check_cuda"; then pass "CUDA suite ($(elapsed "$t") s)"
    else failed "CUDA suite"; fi
    if "$B/tests/gpu/gpu_hash"; then pass "C example examples/gpu_hash.c"
    else failed "C example examples/gpu_hash.c"; fi
    if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        if timeout 120 python3 examples/torch_cuda_hash.py --lib "$B/libdetcheck.so" --check; then
            pass "PyTorch ctypes example (--check)"
        else failed "PyTorch ctypes example (--check)"; fi
    else note "SKIP  PyTorch ctypes example: no PyTorch with CUDA here"; fi
    # the Python package on CUDA tensors (issue 14): digest, digest_shard, manifest == CPU
    if python3 -c "import torch, pytest, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        if DETCHECK_LIB="$B/libdetcheck.so.0" DETCHECK="$B/detcheck" PYTHONPATH=python/src:python/tests \
            timeout 120 python3 -m pytest -q -p no:cacheprovider python/tests/test_digest.py -k cuda; then
            pass "Python package on CUDA tensors"
        else failed "Python package on CUDA tensors"; fi
    else note "SKIP  Python package on CUDA tensors: no PyTorch with CUDA and pytest here"; fi

    echo "== 2. hash --device cuda against the CPU path"
    # mpirun tests need the Open MPI runtime detcheck loads (dlopen: libmpi.so.40,
    # or DETCHECK_MPI_LIB), with its plugins and helpers
    mpi_lib=${DETCHECK_MPI_LIB:-$(readlink -f /usr/lib/x86_64-linux-gnu/libmpi.so.40 2>/dev/null)}
    if ! command -v mpirun > /dev/null || [ ! -d "$(dirname "$(readlink -f /usr/lib/x86_64-linux-gnu/libmpi.so.40 2>/dev/null || echo /nonexistent/x)")/openmpi" ]; then
        DCK_NO_MPI_TESTS="no Open MPI runtime matching the build here (libmpi: ${mpi_lib:-?})"
        export DCK_NO_MPI_TESTS
        note "SKIP  mpirun tests: $DCK_NO_MPI_TESTS"
    fi
    if sh tests/run.sh "$B" distributed; then pass "CLI tests test_distributed* (GPU branches)"
    else failed "CLI tests test_distributed*"; fi
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
    export SOURCE_DATE_EPOCH=1700000000
    "$D" hash -o "$work/mixed-cpu.yaml" "$work"/mixed*.safetensors &&
        DETCHECK_GPU_BUFFER_MIB=4 "$D" hash --device cuda -o "$work/mixed-gpu.yaml" "$work"/mixed*.safetensors &&
        cmp "$work/mixed-cpu.yaml" "$work/mixed-gpu.yaml" &&
        pass "mixed checkpoint: --device cuda manifest == CPU manifest (4 MiB staging buffers)" ||
        failed "mixed checkpoint: --device cuda manifest differs from the CPU's"

    echo "== 3. benchmark"
    "$B/tests/gpu/bench_gpu" 8
    rc=$?
    case $rc in
    0) pass "digest throughput >= 0.8 of the read-only peer (8 GiB)" ;;
    3) note "GOAL  digest throughput below 0.8 of the read-only peer (8 GiB)"
       [ $status -eq 0 ] && status=3 ;;
    *) failed "bench_gpu (exit $rc)" ;;
    esac
    # a 4 GiB file: 16 BF16 tensors of 256 MiB (a 64 MiB random block repeated)
    (cd "$work" && python3 - <<'PY'
import json, os, struct
block = os.urandom(64 << 20)
hdr, n = {}, 256 << 20
for i in range(16):
    hdr["model.layers.%d.weight" % i] = {"dtype": "BF16", "shape": [n // 2 // 4096, 4096],
                                         "data_offsets": [i * n, (i + 1) * n]}
h = json.dumps(hdr).encode()
with open("big.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for _ in range(64):
        f.write(block)
PY
    )
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
    tc=$(best "$D" hash -o "$work/big-cpu.yaml" "$work/big.safetensors") || failed "4 GiB CPU hash"
    tg=$(best "$D" hash --device cuda -o "$work/big-gpu.yaml" "$work/big.safetensors") || failed "4 GiB GPU hash"
    tcn=$(best "$D" hash --no-files -o "$work/big-cpu-nf.yaml" "$work/big.safetensors") || failed "4 GiB CPU hash"
    tgn=$(best "$D" hash --no-files --device cuda -o "$work/big-gpu-nf.yaml" "$work/big.safetensors") || failed "4 GiB GPU hash"
    if cmp "$work/big-cpu.yaml" "$work/big-gpu.yaml" && cmp "$work/big-cpu-nf.yaml" "$work/big-gpu-nf.yaml"; then
        pass "4 GiB file: --device cuda manifest == CPU manifest"
    else failed "4 GiB file: manifests differ"; fi
    awk -v c="$tc" -v g="$tg" -v cn="$tcn" -v gn="$tgn" 'BEGIN {
        printf "  hash 4 GiB file (page cache), %d CPU threads\n", '"$(nproc)"'
        printf "    CPU path            %6.2f s  %6.2f GB/s\n", c, 4.294967296 / c
        printf "    --device cuda       %6.2f s  %6.2f GB/s  (x%.2f vs CPU)\n", g, 4.294967296 / g, c / g
        printf "    CPU, --no-files     %6.2f s  %6.2f GB/s\n", cn, 4.294967296 / cn
        printf "    cuda, --no-files    %6.2f s  %6.2f GB/s  (x%.2f vs CPU)\n", gn, 4.294967296 / gn, cn / gn
    }'
    note "INFO  4 GiB file: CPU ${tc}s, --device cuda ${tg}s (with file hashes); ${tcn}s / ${tgn}s without"
    # the Python Recorder's cost (issue 14): per-tensor digests of every
    # parameter and gradient of a 1.007B-parameter F32 MLP (15 x 8192x8192)
    # after each AdamW step of 8192 rows, vs the step (synchronized wall
    # time; goal <= 2%). About 25 GB of GPU memory, well under 60 s.
    if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        echo "== 3b. detcheck.Recorder on CUDA, ~1B parameters (bench/recorder_cost.py)"
        out=$(DETCHECK_LIB="$B/libdetcheck.so.0" PYTHONPATH=python/src timeout 180 python3 bench/recorder_cost.py \
            --device cuda --width 8192 --layers 15 --batch 8192 --steps 5 --goal 0.02)
        rc=$?
        echo "$out" | sed 's/^/   /'
        case $rc in
        0) pass "Recorder on CUDA, 1B params: $(echo "$out" | sed -n 's/^goal *//p')" ;;
        3) note "GOAL  Recorder on CUDA, 1B params: $(echo "$out" | sed -n 's/^goal *//p')"
           [ $status -eq 0 ] && status=3 ;;
        *) failed "Recorder cost on CUDA (bench/recorder_cost.py exit $rc)" ;;
        esac
    else note "SKIP  Recorder cost on CUDA: no PyTorch with CUDA here"; fi
    train_checks
    canary_checks
    if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        TPY=python3 LIB="$B/libdetcheck.so.0"
        trace_checks cuda
    else note "SKIP  6. op tracing on the GPU: no PyTorch with CUDA here"; fi
    echo
    echo "== summary$results"
    exit $status
}

main() {
    case $phase in
    build) build ;;
    run) run_checks ;;
    cpu) cpu_checks ;;
    all)
        [ -x "$B/detcheck" ] || build
        run_checks
        ;;
    *) echo "usage: ci/gpu-check.sh [build|run|cpu]"; exit 2 ;;
    esac
}

log=${OUT:-${TMPDIR:-/tmp}}/gpu-check.log
rcfile=$(mktemp "${TMPDIR:-/tmp}/gpu-check-rc.XXXXXX")
( (main); echo $? > "$rcfile" ) 2>&1 | tee "$log"
rc=$(cat "$rcfile")
rm -f "$rcfile"
exit "${rc:-1}"

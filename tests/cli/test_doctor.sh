# CLI: detcheck doctor (man detcheck-doctor(1)) says what this detcheck finds
# at run time and from where, on stub libraries built here with cc, so it
# runs without a GPU: a wheel's NCCL and cuBLAS (whose cuBLASLt loads only
# when taken first from the same folder) win over the system's, the
# override over the wheel, a driver and an MPI in $CONDA_PREFIX/lib, a
# runtime that lacks functions is "unusable" with what it lacks, and a
# library not found is "absent" with every place looked in, one line each.
# Also --json, --require (exit 1), bad options (exit 2), --version --verbose.
# This machine may have a real CUDA and MPI on the binary's rpath: each check
# is on a stub that must win by the order, or holds either way.
. "$DCK_TOP/tests/cli/lib.sh"
for v in DETCHECK_CUDART_LIB DETCHECK_NCCL_LIB DETCHECK_CUBLAS_LIB DETCHECK_MPI_LIB DETCHECK_SITE_PACKAGES \
         VIRTUAL_ENV CONDA_PREFIX CUDA_HOME CUDA_PATH PYTHONUSERBASE DETCHECK_DIGEST_KERNEL; do
    unset $v
done
export HOME="$TESTTMP/home"
T=$(cd "$TESTTMP" && pwd -P)
command -v cc > /dev/null || skip "no cc to build the stub libraries"

expect_exit 0 "$DETCHECK" doctor
cp out.txt plain.txt
expect_grep "^detcheck: [0-9]" out.txt
expect_grep "^CPU (digest): " out.txt
expect_grep "^    kernel portable (needs nothing): runs here" out.txt
for row in "CUDA driver" "CUDA runtime" "cuBLAS" "NCCL" "MPI"; do
    expect_grep "^$row: " out.txt
done
# --version --verbose prints the same
expect_exit 0 "$DETCHECK" --version --verbose
cmp out.txt plain.txt || fail "--version --verbose differs from doctor"
ok
expect_exit 2 "$DETCHECK" doctor --no-such-option
expect_grep "unknown or incomplete option" err.txt
expect_exit 2 "$DETCHECK" doctor --require gpu
expect_grep "require takes driver, cuda, cublas, nccl, mpi; not 'gpu'" err.txt
expect_exit 2 "$DETCHECK" doctor extra
# a digest kernel forced by the environment is said
expect_exit 0 env DETCHECK_DIGEST_KERNEL=portable "$DETCHECK" doctor
expect_grep "^CPU (digest): portable (DETCHECK_DIGEST_KERNEL=portable)" out.txt

# stub NAME CODE [LINK...]: $T/stubs/NAME, a shared library of the C code
# CODE (soname NAME), linked with LINK
mkdir -p stubs
stub() {
    name=$1 code=$2
    shift 2
    printf '%s\n' "$code" > "stubs/$name.c"
    cc -shared -fPIC -Wl,-soname,"$name" -o "stubs/$name" "stubs/$name.c" "$@" || fail "cc $name"
}
# put DIR NAME...: copies of the stubs in $T/DIR
put() {
    dir=$1
    shift
    mkdir -p "$dir"
    for n in "$@"; do cp "stubs/$n" "$dir/" || fail "cp $n"; done
}

if grep -q "^    CUDA: not built in" plain.txt; then
    expect_grep "^NCCL: not built" plain.txt
    expect_grep "^    this detcheck was built without CUDA" plain.txt
    skip_part "CUDA=0 build: no CUDA library is looked for"
else
    major=$(sed -n 's/.*loads libcudart\.so\.\([0-9]*\) at run time.*/\1/p' plain.txt)
    [ -n "$major" ] || fail "no CUDA major in doctor's first row"
    # NCCL: every function of the loader's table; ncclGetVersion says 2.99.7
    fns=$(sed -n 's/^ *X(\(nccl[A-Za-z]*\)).*/int \1(void) { return 0; }/p' "$DCK_TOP/src/gpu/cuda_loader.h")
    stub libnccl.so.2 "$fns int ncclGetVersion(int *v) { *v = 29907; return 0; }"
    put site/nvidia/nccl/lib libnccl.so.2
    # cuBLAS needs its cuBLASLt (NEEDED), whose stub alone has the patch level
    stub "libcublasLt.so.$major" "int dck_lt_patch(void) { return 4; }"
    stub "libcublas.so.$major" "int dck_lt_patch(void);
int cublasCreate_v2(void) { return 0; } int cublasDestroy_v2(void) { return 0; }
int cublasSetStream_v2(void) { return 0; } int cublasSgemm_v2(void) { return 0; }
int cublasGetProperty(int t, int *v) { *v = t == 0 ? $major : t == 1 ? 9 : dck_lt_patch(); return 0; }" \
        "stubs/libcublasLt.so.$major"
    put "site/nvidia/cu$major/lib" "libcublas.so.$major" "libcublasLt.so.$major"
    # the runtime: its whole table; no device
    fns=$(sed -n 's/^ *X(\(cuda[A-Za-z]*\)).*/\1/p' "$DCK_TOP/src/gpu/cuda_loader.h" |
        grep -v -e cudaRuntimeGetVersion -e cudaDriverGetVersion -e cudaGetDeviceCount -e cudaGetError |
        sed 's/.*/int &(void) { return 0; }/')
    stub "libcudart.so.$major" "$fns
int cudaRuntimeGetVersion(int *v) { *v = ${major}070; return 0; }
int cudaDriverGetVersion(int *v) { *v = 0; return 0; }
int cudaGetDeviceCount(int *n) { *n = 0; return 100; }
const char *cudaGetErrorName(int e) { (void)e; return \"cudaErrorNoDevice\"; }
const char *cudaGetErrorString(int e) { (void)e; return \"no CUDA-capable device is detected\"; }"
    put "site/nvidia/cu$major/lib" "libcudart.so.$major"
    # a runtime too old: one function only
    stub old.so "int cudaRuntimeGetVersion(int *v) { *v = 9000; return 0; }"
    mkdir -p old/nvidia/cuda_runtime/lib && cp stubs/old.so "old/nvidia/cuda_runtime/lib/libcudart.so.$major"
    # the driver: no device in one, two GPUs in the other
    drv='int cuDriverGetVersion(int *v) { *v = 13010; return 0; }
int cuGetErrorName(int e, const char **s) { *s = e == 100 ? "CUDA_ERROR_NO_DEVICE" : "?"; return 0; }
int cuGetErrorString(int e, const char **s) { (void)e; *s = "no CUDA-capable device is detected"; return 0; }
int cuDeviceGet(int *d, int i) { *d = i; return 0; }
int cuDeviceGetName(char *s, int n, int d) { __builtin_snprintf(s, n, "Fake GPU %d", d); return 0; }'
    stub nodev.so "$drv
int cuInit(unsigned f) { (void)f; return 100; } int cuDeviceGetCount(int *n) { *n = 0; return 100; }"
    stub twodev.so "$drv
int cuInit(unsigned f) { (void)f; return 0; } int cuDeviceGetCount(int *n) { *n = 2; return 0; }"
    mkdir -p conda-nodev/lib conda-twodev/lib
    cp stubs/nodev.so conda-nodev/lib/libcuda.so.1
    cp stubs/twodev.so conda-twodev/lib/libcuda.so.1

    # the wheels win over the system's loader path (where a real CUDA may be)
    expect_exit 0 env DETCHECK_SITE_PACKAGES="$T/site" "$DETCHECK" doctor
    expect_grep "^NCCL: found 2.99.7: $T/site/nvidia/nccl/lib/libnccl.so.2 (NVIDIA wheel)$" out.txt
    expect_grep "^cuBLAS: found $major.9.4: $T/site/nvidia/cu$major/lib/libcublas.so.$major (NVIDIA wheel)$" out.txt
    expect_grep "^    cuBLASLt loaded first from the same folder$" out.txt
    expect_grep "^CUDA runtime: found $major.7: $T/site/nvidia/cu$major/lib/libcudart.so.$major (NVIDIA wheel)$" out.txt
    expect_grep "^    cudaGetDeviceCount: cudaErrorNoDevice: no CUDA-capable device is detected$" out.txt
    # and from a venv's site-packages, found by $VIRTUAL_ENV alone
    mkdir -p venv/lib/python3.99/site-packages
    mv site/nvidia venv/lib/python3.99/site-packages/
    expect_exit 0 env VIRTUAL_ENV="$T/venv" "$DETCHECK" doctor
    expect_grep "^NCCL: found 2.99.7: $T/venv/lib/python3.99/site-packages/nvidia/nccl/lib/libnccl.so.2 (NVIDIA wheel)$" out.txt
    mv venv/lib/python3.99/site-packages/nvidia site/
    # the override wins over the wheel; one that is missing is all there is
    stub other.so "$(sed -n 's/^ *X(\(nccl[A-Za-z]*\)).*/int \1(void) { return 0; }/p' "$DCK_TOP/src/gpu/cuda_loader.h")
int ncclGetVersion(int *v) { *v = 2113; return 0; }"
    expect_exit 0 env DETCHECK_SITE_PACKAGES="$T/site" DETCHECK_NCCL_LIB="$T/stubs/other.so" "$DETCHECK" doctor
    expect_grep "^NCCL: found 2.1.13: $T/stubs/other.so (DETCHECK_NCCL_LIB)$" out.txt
    expect_exit 1 env DETCHECK_SITE_PACKAGES="$T/site" DETCHECK_NCCL_LIB=libnccl-dck-missing.so.2 \
        "$DETCHECK" doctor --require cuda,nccl
    expect_grep "^NCCL: absent; looked for in:$" out.txt
    expect_grep "^    DETCHECK_NCCL_LIB: libnccl-dck-missing.so.2: cannot open shared object file" out.txt
    expect_grep "^CUDA runtime: found" out.txt
    expect_grep "require nccl: NCCL is absent" err.txt
    expect_no_grep "require cuda" err.txt
    # a runtime that lacks functions: found, unusable, with what it lacks
    expect_exit 1 env DETCHECK_SITE_PACKAGES="$T/old" "$DETCHECK" doctor --require cuda
    expect_grep "^CUDA runtime: unusable: $T/old/nvidia/cuda_runtime/lib/libcudart.so.$major (NVIDIA wheel)$" out.txt
    expect_grep "^    the CUDA runtime has no cudaGetErrorString: too old for this detcheck" out.txt
    expect_grep "require cuda: CUDA runtime is unusable" err.txt
    # the driver from $CONDA_PREFIX/lib: without a device, then with two
    expect_exit 1 env CONDA_PREFIX="$T/conda-nodev" "$DETCHECK" doctor --require driver
    expect_grep "^CUDA driver: unusable 13.1: $T/conda-nodev/lib/libcuda.so.1 (\$CONDA_PREFIX/lib)$" out.txt
    expect_grep "^    cuInit: error 100 CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected$" out.txt
    expect_exit 0 env CONDA_PREFIX="$T/conda-twodev" "$DETCHECK" doctor --require driver
    expect_grep "^CUDA driver: found 13.1: $T/conda-twodev/lib/libcuda.so.1 (\$CONDA_PREFIX/lib)$" out.txt
    expect_grep "^    2 devices$" out.txt
    expect_grep "^    GPU 1: Fake GPU 1$" out.txt
    # --json: the same rows
    expect_exit 0 env DETCHECK_SITE_PACKAGES="$T/site" "$DETCHECK" doctor --json
    python3 - "$T" "$major" out.txt <<'PY' || fail "doctor --json"
import json, sys
t, major, path = sys.argv[1], sys.argv[2], sys.argv[3]
rows = {r["key"]: r for r in json.load(open(path))["rows"]}
assert list(rows) == ["detcheck", "cpu", "driver", "cuda", "cublas", "nccl", "mpi"], list(rows)
n = rows["nccl"]
assert (n["state"], n["version"], n["from"]) == ("found", "2.99.7", "NVIDIA wheel"), n
assert n["path"] == t + "/site/nvidia/nccl/lib/libnccl.so.2", n
assert rows["cuda"]["detail"][-1].startswith("cudaGetDeviceCount: cudaErrorNoDevice"), rows["cuda"]
d = rows["driver"]
assert d["state"] in ("found", "unusable", "absent") and (d["state"] != "absent" or d["why"]), d
PY
    ok
fi

# the driver not found: every place, one line each (where this machine has none)
mkdir -p empty/lib
if ldconfig -p 2> /dev/null | grep -q "libcuda\.so\.1 "; then
    skip_part "this machine has a libcuda.so.1: the driver's absent lines are not checked"
elif grep -q "^CUDA driver: not built" plain.txt; then
    skip_part "CUDA=0 build: no driver row to check"
else
    expect_exit 0 env CONDA_PREFIX="$T/empty" "$DETCHECK" doctor
    expect_grep "^CUDA driver: absent; looked for in:$" out.txt
    expect_grep "^    already loaded: not in this process$" out.txt
    expect_grep "^    \$CONDA_PREFIX/lib: $T/empty/lib has no libcuda.so.1$" out.txt
    expect_grep "^    system loader path: libcuda.so.1: cannot open shared object file" out.txt
fi

# MPI from $CONDA_PREFIX/lib, before the system's: a library that is no MPI
B="$DCK_TOP/${BUILD:-build}"
if grep -q -- "-DDCK_HAVE_MPI=1" "$B/flags.txt" 2> /dev/null; then
    soname=$(sed -n 's/.*#define DCK_MPI_SONAME "\(.*\)".*/\1/p' "$DCK_TOP/src/common/mpi_loader.c" | head -n 1)
    stub notmpi.so "int MPI_Get_library_version(char *s, int *n) { *n = 0; *s = 0; return 0; }"
    mkdir -p conda-mpi/lib && cp stubs/notmpi.so "conda-mpi/lib/$soname"
    expect_exit 1 env CONDA_PREFIX="$T/conda-mpi" "$DETCHECK" doctor --require mpi
    expect_grep "^MPI: unusable: $T/conda-mpi/lib/$soname (\$CONDA_PREFIX/lib)$" out.txt
    expect_grep "^    the MPI library has no MPI_Initialized: not MPI, or too old" out.txt
    expect_exit 1 env DETCHECK_MPI_LIB=libmpi-dck-missing.so.40 "$DETCHECK" doctor --require mpi
    expect_grep "^MPI: absent; looked for in:$" out.txt
    expect_grep "^    DETCHECK_MPI_LIB: libmpi-dck-missing.so.40: cannot open shared object file" out.txt
else
    expect_grep "^MPI: not built" plain.txt
    skip_part "MPI=0 build: no MPI library is looked for"
fi
done_ok

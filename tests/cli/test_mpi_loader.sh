# CLI: libmpi is loaded only for a distributed path (src/common/mpi_loader.c).
# Neither the binary nor libdetcheck.so links it (ldd, NEEDED), a plain call
# never maps it (LD_DEBUG), and a rank whose launcher is detected from the
# environment but whose MPI library cannot be loaded (DETCHECK_MPI_LIB
# pointing at a missing name, or at a library that is not MPI) exits 2 with a
# message naming it, under mpirun too. In an MPI=0 build the message says the
# build has no MPI.
. "$DCK_TOP/tests/cli/lib.sh"
export SOURCE_DATE_EPOCH=1700000000
# Open MPI allocates at init in ways LeakSanitizer reports (SANITIZE=1 builds)
export ASAN_OPTIONS=detect_leaks=0
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
B="$DCK_TOP/${BUILD:-build}"
with_mpi=0
grep -q -- "-DDCK_HAVE_MPI=1" "$B/flags.txt" 2> /dev/null && with_mpi=1

if command -v ldd > /dev/null; then
    ldd "$DETCHECK" > ldd.txt 2>&1 || true
    expect_grep "libc\.so" ldd.txt
    expect_no_grep "libmpi" ldd.txt
    expect_no_grep "libopen-pal" ldd.txt
else
    skip_part "no ldd here: the linked libraries are not checked"
fi
if command -v readelf > /dev/null && [ -f "$B/libdetcheck.so" ]; then
    readelf -d "$B/libdetcheck.so" > dyn.txt
    expect_grep "(NEEDED)" dyn.txt
    expect_no_grep "libmpi" dyn.txt
else
    skip_part "no readelf or no $B/libdetcheck.so: its NEEDED entries are not checked"
fi

python3 - <<'PY'
import json, struct
h = json.dumps({"w": {"dtype": "F32", "shape": [300], "data_offsets": [0, 1200]}}).encode()
open("one.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(range(256)) * 4 + bytes(176))
PY
expect_exit 0 "$DETCHECK" hash -o plain.yaml one.safetensors

# a plain call maps no MPI library, not even later by dlopen
LD_DEBUG=files "$DETCHECK" verify -g plain.yaml one.safetensors > /dev/null 2> lddebug.txt ||
    fail "verify: exit $?"
expect_grep "file=" lddebug.txt
expect_no_grep "libmpi" lddebug.txt

# a launcher's environment without a loadable MPI: exit 2, naming the library
missing=libmpi-dck-missing.so.40
expect_exit 2 env OMPI_COMM_WORLD_SIZE=1 OMPI_COMM_WORLD_RANK=0 DETCHECK_MPI_LIB=$missing \
    "$DETCHECK" hash --distributed -o d.yaml one.safetensors
[ ! -e d.yaml ] || fail "a manifest without MPI"
ok
if [ "$with_mpi" = 1 ]; then
    expect_grep "cannot load the MPI library ($missing)" err.txt
    expect_grep "$missing: cannot open shared object file" err.txt
    expect_exit 2 env OMPI_COMM_WORLD_SIZE=1 DETCHECK_MPI_LIB=$missing "$DETCHECK" train --steps 1 --out t
    expect_grep "cannot load the MPI library ($missing)" err.txt
    # a library that is there but is not MPI
    notmpi=$(ldd "$DETCHECK" 2> /dev/null | awk '/libz\.so/ {print $3; exit}')
    if [ -n "$notmpi" ]; then
        expect_exit 2 env PMIX_RANK=0 DETCHECK_MPI_LIB="$notmpi" "$DETCHECK" hash --distributed one.safetensors
        expect_grep "the MPI library has no MPI_Initialized" err.txt
    else
        skip_part "no libz found by ldd: the not-MPI library case is not checked"
    fi
else
    expect_grep "built without MPI" err.txt
fi
# without a launcher --distributed is one rank: MPI is not asked for
expect_exit 0 env DETCHECK_MPI_LIB=$missing "$DETCHECK" hash --distributed -o solo.yaml one.safetensors
cmp plain.yaml solo.yaml || fail "--distributed without a launcher differs"
ok

if [ "$with_mpi" = 1 ] && command -v mpirun > /dev/null && [ -z "${DCK_NO_MPI_TESTS:-}" ]; then
    # every rank fails the same way, and mpirun exits 2
    expect_exit 2 mpirun --oversubscribe -np 2 -x DETCHECK_MPI_LIB=$missing \
        "$DETCHECK" hash --distributed one.safetensors
    expect_grep "cannot load the MPI library ($missing)" err.txt
    # and with the library found, the ranks load it and agree with one process
    expect_exit 0 mpirun --oversubscribe -np 2 "$DETCHECK" hash --distributed -o d2.yaml one.safetensors
    cmp plain.yaml d2.yaml || fail "mpirun -np 2 manifest differs"
    ok
else
    skip_part "no MPI build or no mpirun: the mpirun cases are not checked"
fi
done_ok

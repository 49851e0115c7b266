# libdetcheck.so exports exactly the functions marked DCK_API in the installed
# headers (detcheck.h, detcheck_static.h): an internal symbol that leaks, a
# marked function that is not exported, or a function the headers declare
# without DCK_API fails it. The check is then run on planted faults of each
# kind and must fail on every one.
. "$DCK_TOP/tests/cli/lib.sh"
command -v nm > /dev/null || fail "nm is needed"
root="$TESTTMP/root"
make -s -C "$DCK_TOP" install BUILD="$BUILD" PREFIX=/opt/dck DESTDIR="$root" > make.log 2>&1 ||
    { cat make.log; fail "make install"; }
inc="$root/opt/dck/include"
lib=$(ls "$root"/opt/dck/lib/libdetcheck.so.*.*.*)

# marked DIR: the functions marked DCK_API in DIR's headers. The preprocessor
# turns the mark into a word of its own (the header leaves a DCK_API defined
# before it alone) and drops comments and conditionals.
marked() {
    for h in "$1"/*.h; do cc -E -P -DDCK_API=DCK_API_MARK -I"$1" "$h"; done | tr '\n' ' ' |
        grep -o 'DCK_API_MARK[^;{}(]*(' | sed 's/ *($//; s/.*[^A-Za-z0-9_]//' | sort -u
}
# declared DIR: every function DIR's headers declare (gcc's -aux-info lists
# each declaration with its file), static inline ones left out.
declared() {
    for h in "$1"/*.h; do
        printf '#include "%s"\n' "$h" > decl.c
        cc -I"$1" -fsyntax-only -aux-info decl.txt decl.c
        grep -F "/* $1/" decl.txt | grep -v '\*/ static ' | sed 's/ (.*//; s/.*[^A-Za-z0-9_]//'
    done | sort -u
}
exported() { nm -D --defined-only "$1" | awk 'NF == 3 {print $3}' | sort -u; }

# check_exports LIB DIR: prints what is wrong; non-zero when anything is.
check_exports() {
    marked "$2" > marked.txt
    declared "$2" > declared.txt
    exported "$1" > exported.txt
    [ -s marked.txt ] && [ -s exported.txt ] || { echo "nothing marked or nothing exported"; return 1; }
    comm -23 exported.txt marked.txt | sed 's/^/leaked (exported, not marked DCK_API): /' > problems.txt
    comm -13 exported.txt marked.txt | sed 's/^/missing (marked DCK_API, not exported): /' >> problems.txt
    comm -23 declared.txt marked.txt | sed 's/^/declared without DCK_API: /' >> problems.txt
    cat problems.txt
    echo "$(wc -l < marked.txt) marked, $(wc -l < exported.txt) exported"
    [ ! -s problems.txt ]
}

# the installed library and headers
expect_exit 0 check_exports "$lib" "$inc"
expect_grep '^[0-9]* marked, [0-9]* exported$' out.txt
for f in dck_version_number dck_free dck_digest_buffer dck_checkpoint_open dck_diff_paths \
         dck_segments_sum dck_tensor_hasher_add dck_safetensors_write dck_write_file_atomic \
         dck_seal_path dck_seal_mark dck_seal_save dck_seal_load dck_seal_verify dck_seal_result_release; do
    grep -qx "$f" exported.txt || fail "$f not exported"; ok
done
# the Python package binds the seal calls with ctypes: one of them, called
# (an ASan build runs with the sanitizer runtimes preloaded, as test_python)
mkdir sealed
pre=
if nm -D "$lib" | grep -q '__asan_init'; then
    pre="$(${CC:-cc} -print-file-name=libasan.so) $(${CC:-cc} -print-file-name=libubsan.so)"
fi
expect_exit 0 env LD_PRELOAD="$pre" ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0 python3 -c 'import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
for f in ("dck_seal_path", "dck_seal_mark", "dck_seal_save", "dck_seal_load", "dck_seal_verify",
          "dck_seal_result_release"):
    getattr(lib, f)
out = ctypes.c_void_p()
lib.dck_seal_path.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
assert lib.dck_seal_path(b"sealed", ctypes.byref(out)) == 0
print(ctypes.string_at(out.value).decode())
lib.dck_free(out)' "$lib"
expect_grep '^sealed/detcheck-seal.yaml$' out.txt
grep -q '^pk_\|^dck_ck_\|^dck_comm_\|^dck_train_\|^dck_reader_' exported.txt && fail "internal symbols exported"
ok

# planted: an internal function built without -fvisibility=hidden leaks
cat > leak.c <<'C'
int dck_planted_internal(void) { return 1; }
C
cc -fPIC -c leak.c -o leak.o
cc -shared -o libleak.so -Wl,--whole-archive "$root/opt/dck/lib/libdetcheck.a" -Wl,--no-whole-archive leak.o
expect_exit 1 check_exports libleak.so "$inc"
expect_grep '^leaked (exported, not marked DCK_API): dck_planted_internal$' out.txt

# planted: a header marks a function the library does not export
mkdir -p missing unmarked
cp "$inc"/*.h missing/
sed -i 's/^#endif \/\* DETCHECK_STATIC_H \*\//DCK_API int dck_planted_missing(void);\n&/' missing/detcheck_static.h
expect_exit 1 check_exports "$lib" "$PWD/missing"
expect_grep '^missing (marked DCK_API, not exported): dck_planted_missing$' out.txt

# planted: a public function declared without DCK_API (hidden, so not exported)
cp "$inc"/*.h unmarked/
sed -i 's/^DCK_API \(unsigned dck_version_number(void);\)/\1/' unmarked/detcheck.h
expect_exit 1 check_exports "$lib" "$PWD/unmarked"
expect_grep '^declared without DCK_API: dck_version_number$' out.txt
expect_grep '^leaked (exported, not marked DCK_API): dck_version_number$' out.txt
done_ok

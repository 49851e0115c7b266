# make install honours PREFIX and DESTDIR; the installed header, library and
# pkg-config file build a program that computes a golden digest vector.
. "$DCK_TOP/tests/cli/lib.sh"
root="$TESTTMP/root"
make -s -C "$DCK_TOP" install BUILD="$BUILD" PREFIX=/opt/dck DESTDIR="$root" > make.log 2>&1 || { cat make.log; fail "make install"; }
for f in bin/detcheck lib/libdetcheck.a lib/libdetcheck.so include/detcheck.h lib/pkgconfig/detcheck.pc \
         share/man/man1/detcheck.1 share/man/man1/detcheck-hash.1 share/man/man1/detcheck-verify.1 \
         share/man/man7/detcheck-digest.7; do
    [ -e "$root/opt/dck/$f" ] || fail "not installed: $f"; ok
done
expect_grep "prefix=/opt/dck" "$root/opt/dck/lib/pkgconfig/detcheck.pc"
expect_grep "Version: " "$root/opt/dck/lib/pkgconfig/detcheck.pc"
cat > v.c <<'C'
#include <detcheck.h>
#include <stdio.h>
int main(void) {
    float f[] = {1, 2, 3, 4};
    uint64_t shape[] = {4};
    dck_digest d;
    char hex[33];
    if (dck_digest_buffer(DCK_F32, shape, 1, f, sizeof f, 1, &d) != DCK_OK) return 2;
    dck_digest_to_hex(d, hex);
    puts(hex);
    return 0;
}
C
# through the installed detcheck.pc: shared, and static (Libs.private and
# Requires.private must name everything libdetcheck.a needs)
# a sanitizer build's library needs its runtime linked into the program too
san=$(grep -o -- '-fsanitize=[^ ]*' "$DCK_TOP/$BUILD/ldlibs.txt" | head -n 1 || true)
pc() { PKG_CONFIG_PATH="$root/opt/dck/lib/pkgconfig" pkg-config --define-variable=prefix="$root/opt/dck" "$@" detcheck; }
cc $san v.c -o v $(pc --cflags --libs) || fail "compile against the installed shared library"
ok
LD_LIBRARY_PATH="$root/opt/dck/lib" ./v > v.out
expect_grep "^2ef28aceb3e398dd66f6ba2696aa9c68$" v.out
cc $san v.c -o vs $(pc --cflags) "$root/opt/dck/lib/libdetcheck.a" $(pc --static --libs | sed 's/-ldetcheck//') ||
    fail "static link with pkg-config --static"
ok
./vs > vs.out
expect_grep "^2ef28aceb3e398dd66f6ba2696aa9c68$" vs.out
"$root/opt/dck/bin/detcheck" --version > ver.txt
expect_grep "detcheck" ver.txt
done_ok

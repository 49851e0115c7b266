# make install honours PREFIX and DESTDIR; the installed headers, libraries
# and pkg-config file build a program that computes a golden digest vector,
# through the stable API and through the unstable one (detcheck_static.h).
# The shared library is libdetcheck.so.MAJOR.MINOR.PATCH with SONAME
# libdetcheck.so.MAJOR and the .so.MAJOR and .so links. The bash and zsh
# completions go where bash-completion and zsh look (share/...).
. "$DCK_TOP/tests/cli/lib.sh"
root="$TESTTMP/root"
make -s -C "$DCK_TOP" install BUILD="$BUILD" PREFIX=/opt/dck DESTDIR="$root" > make.log 2>&1 || { cat make.log; fail "make install"; }
for f in bin/detcheck lib/libdetcheck.a lib/libdetcheck.so include/detcheck.h include/detcheck_static.h \
         lib/pkgconfig/detcheck.pc \
         share/man/man1/detcheck.1 share/man/man1/detcheck-hash.1 share/man/man1/detcheck-verify.1 \
         share/man/man7/detcheck-digest.7 \
         share/bash-completion/completions/detcheck share/zsh/site-functions/_detcheck; do
    [ -e "$root/opt/dck/$f" ] || fail "not installed: $f"; ok
done
expect_grep "prefix=/opt/dck" "$root/opt/dck/lib/pkgconfig/detcheck.pc"
ver=$(sed -n 's/^#define DCK_VERSION_STRING "\(.*\)"$/\1/p' "$DCK_TOP/include/detcheck.h")
major=${ver%%.*}
expect_grep "^Version: $ver$" "$root/opt/dck/lib/pkgconfig/detcheck.pc"
lib="$root/opt/dck/lib"
[ -f "$lib/libdetcheck.so.$ver" ] && [ ! -L "$lib/libdetcheck.so.$ver" ] || fail "no file libdetcheck.so.$ver"
ok
[ "$(readlink "$lib/libdetcheck.so.$major")" = "libdetcheck.so.$ver" ] || fail "libdetcheck.so.$major: not a link to libdetcheck.so.$ver"
ok
[ "$(readlink "$lib/libdetcheck.so")" = "libdetcheck.so.$ver" ] || fail "libdetcheck.so: not a link to libdetcheck.so.$ver"
ok
readelf -d "$lib/libdetcheck.so.$ver" > dyn.txt
expect_grep "(SONAME) *Library soname: \[libdetcheck.so.$major\]" dyn.txt
# v.c prints the digest twice (digest_buffer; segment sums + digest_finish)
# and checks the version macros against the library it runs with.
cat > v.c <<'C'
#include <detcheck_static.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    float f[] = {1, 2, 3, 4};
    uint64_t shape[] = {4};
    dck_digest d;
    char hex[33];
    char vs[32];
    snprintf(vs, sizeof vs, "%d.%d.%d", DCK_VERSION_MAJOR, DCK_VERSION_MINOR, DCK_VERSION_PATCH);
    if (strcmp(vs, DCK_VERSION_STRING) || strcmp(dck_version(), DCK_VERSION_STRING) ||
        dck_version_number() != DCK_VERSION_NUMBER ||
        DCK_VERSION_NUMBER != DCK_VERSION_MAJOR * 10000 + DCK_VERSION_MINOR * 100 + DCK_VERSION_PATCH)
        return 3;
    if (dck_digest_buffer(DCK_F32, shape, 1, f, sizeof f, 1, &d) != DCK_OK) return 2;
    dck_digest_to_hex(d, hex);
    puts(hex);
    d = dck_digest_finish(DCK_F32, shape, 1, dck_segments_sum(f, sizeof f, 0));
    dck_digest_to_hex(d, hex);
    puts(hex);
    char *layer = dck_layer_of_name("model.layers.12.mlp.weight");
    if (!layer || strcmp(layer, "layers.12")) return 4;
    dck_free(layer);
    dck_free(NULL);
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
readelf -d v > vdyn.txt
expect_grep "(NEEDED) *Shared library: \[libdetcheck.so.$major\]" vdyn.txt
LD_LIBRARY_PATH="$root/opt/dck/lib" ./v > v.out || fail "v: exit $?"
[ "$(grep -c "^2ef28aceb3e398dd66f6ba2696aa9c68$" v.out)" -eq 2 ] || { cat v.out; fail "digests of v"; }
ok
cc $san v.c -o vs $(pc --cflags) "$root/opt/dck/lib/libdetcheck.a" $(pc --static --libs | sed 's/-ldetcheck//') ||
    fail "static link with pkg-config --static"
ok
./vs > vs.out || fail "vs: exit $?"
[ "$(grep -c "^2ef28aceb3e398dd66f6ba2696aa9c68$" vs.out)" -eq 2 ] || { cat vs.out; fail "digests of vs"; }
ok
"$root/opt/dck/bin/detcheck" --version > ver.txt
expect_grep "detcheck" ver.txt
# the installed bash completion completes the installed commands
bash -c ". '$root/opt/dck/share/bash-completion/completions/detcheck'; complete -p detcheck" > comp.txt
expect_grep "^complete -F _detcheck detcheck$" comp.txt
expect_grep "resume-check" "$root/opt/dck/share/bash-completion/completions/detcheck"
expect_grep "^#compdef detcheck" "$root/opt/dck/share/zsh/site-functions/_detcheck"
done_ok

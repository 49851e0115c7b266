#!/bin/sh
# Makes the packages for users into dist/ (make wheel, dist-tar, sdist):
#
#   sh ci/package.sh wheel BUILD VERSION     dist/detcheck-VERSION-py3-none-manylinux_2_28_x86_64.whl
#   sh ci/package.sh dist-tar BUILD VERSION  dist/detcheck-VERSION-linux-x86_64.tar.gz
#   sh ci/package.sh sdist BUILD VERSION     dist/detcheck-VERSION.tar.gz
#
# BUILD is the portable build folder (make PORTABLE=1); the wheel packages
# it with python/setup.py (DETCHECK_PREBUILT), the tarball is what `make
# install` put into BUILD/tar-root/detcheck-VERSION (the Makefile runs it).
# The sdist is python/ with the C tree in csrc/ (setup.py builds it with
# make). The tools (build, setuptools, auditwheel) come from `sh ci/venv.sh
# wheel`. Each package is checked before it is published: the wheel's
# platform tag by `auditwheel show` (manylinux_2_28 or older) and its
# files, the tarball's binary byte for byte the build's (the one the wheel
# holds). A package is written under a temporary name and renamed into
# dist/, never over a file that is not a package of its kind.
# Timestamps: SOURCE_DATE_EPOCH, else the last commit's time.
set -eu
what=${1:?usage: ci/package.sh wheel|dist-tar|sdist BUILD VERSION}
build=${2:?BUILD}
version=${3:?VERSION}
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
die() { echo "ci/package.sh: $*" >&2; exit 2; }
py=$(sh ci/venv.sh wheel) || die "no python with the packaging tools (sh ci/venv.sh wheel)"
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315532800)}
export SOURCE_DATE_EPOCH
plat=manylinux_2_28_x86_64
work="$build/pkg-$what"
rm -rf "$work"
mkdir -p "$work"

# publish FILE NAME MAGIC: FILE renamed to dist/NAME, where NAME is absent or
# a regular file starting with MAGIC (hex of its first bytes: the same kind)
publish() {
    mkdir -p dist
    if [ -e "dist/$2" ] || [ -L "dist/$2" ]; then
        [ -f "dist/$2" ] && [ ! -L "dist/$2" ] &&
            [ "$(od -An -tx1 -N${#3} "dist/$2" | tr -d ' \n' | cut -c1-${#3})" = "$3" ] ||
            die "dist/$2 exists and is not a package of its kind: not replaced"
    fi
    tmp="dist/.$2.tmp.$$"
    cp "$1" "$tmp" && mv -f "$tmp" "dist/$2" || { rm -f "$tmp"; die "cannot write dist/$2"; }
    echo "dist/$2"
}

# stage DIR: python/ (less its tests) and the C tree `make all` needs in
# DIR/csrc, as in git (tracked and new files, not ignored ones)
stage() {
    mkdir -p "$1/csrc"
    (cd python && git ls-files --cached --others --exclude-standard -- . ':!tests' ':!*/__pycache__/*') |
        (cd python && tar -cf - -T -) | tar -xf - -C "$1"
    git ls-files --cached --others --exclude-standard -- Makefile src include cuda man detcheck.pc.in \
        ci/completion.sh | tar -cf - -T - | tar -xf - -C "$1/csrc"
    [ -f "$1/setup.py" ] && [ -f "$1/csrc/include/detcheck.h" ] || die "could not stage python/ and the C tree"
}

case $what in
wheel)
    name="detcheck-$version-py3-none-$plat.whl"
    stage "$work/src"
    DETCHECK_PREBUILT="$top/$build" "$py" -m build --wheel --no-isolation --outdir "$work/out" \
        -C--build-option=--plat-name=$plat "$work/src" > "$work/build.log" 2>&1 ||
        { cat "$work/build.log" >&2; die "python -m build --wheel failed"; }
    whl="$work/out/$name"
    [ -f "$whl" ] || die "python -m build wrote $(ls "$work/out"), not $name"
    # the tag auditwheel gives from the ELF files: manylinux_2_N, N <= 28
    "$py" -m auditwheel show "$whl" > "$work/show.txt" 2>&1 || { cat "$work/show.txt" >&2; die "auditwheel show failed"; }
    tag=$(tr '\n' ' ' < "$work/show.txt" | sed -n 's/.*consistent with the following platform tag: *"\([^"]*\)".*/\1/p')
    n=$(echo "$tag" | sed -n 's/^manylinux_2_\([0-9]*\)_x86_64$/\1/p')
    [ -n "$n" ] && [ "$n" -le 28 ] || { cat "$work/show.txt" >&2; die "auditwheel show: platform tag '$tag', not manylinux_2_28_x86_64 or older"; }
    # the files users get, and the CLI byte for byte the portable build's
    "$py" - "$whl" "$build/detcheck" "$version" <<'EOF' || die "the wheel lacks files (above)"
import sys, zipfile
whl, cli, version = sys.argv[1:]
z = zipfile.ZipFile(whl)
data = "detcheck-%s.data/" % version
need = ["detcheck/_native/libdetcheck.so.0", data + "scripts/detcheck",
        data + "data/share/man/man1/detcheck.1", data + "data/share/man/man7/detcheck-digest.7",
        data + "data/share/bash-completion/completions/detcheck", data + "data/share/zsh/site-functions/_detcheck"]
names = set(z.namelist())
missing = [n for n in need if n not in names]
for n in missing:
    print("ci/package.sh: %s: no %s" % (whl, n), file=sys.stderr)
extra = [n for n in names if n.startswith("detcheck/_native/") and n not in need]
for n in extra:
    print("ci/package.sh: %s: %s is not packaged from the build" % (whl, n), file=sys.stderr)
if not missing and z.read(data + "scripts/detcheck") != open(cli, "rb").read():
    print("ci/package.sh: %s: scripts/detcheck is not %s" % (whl, cli), file=sys.stderr)
    missing.append(cli)
if not missing and (z.getinfo(data + "scripts/detcheck").external_attr >> 16) & 0o111 == 0:
    print("ci/package.sh: %s: scripts/detcheck is not executable" % whl, file=sys.stderr)
    missing.append(cli)
sys.exit(1 if missing or extra else 0)
EOF
    publish "$whl" "$name" 504b0304
    ;;
dist-tar)
    name="detcheck-$version-linux-x86_64.tar.gz"
    root="$build/tar-root"
    top_dir="detcheck-$version"
    [ -d "$root/$top_dir" ] || die "no $root/$top_dir (make dist-tar installs it there)"
    cmp -s "$root/$top_dir/bin/detcheck" "$build/detcheck" || die "$root/$top_dir/bin/detcheck is not $build/detcheck"
    # the .pc found wherever the tarball is unpacked (pkg-config's pcfiledir)
    pc="$root/$top_dir/lib/pkgconfig/detcheck.pc"
    sed 's|^prefix=.*|prefix=${pcfiledir}/../..|' "$pc" > "$pc.tmp" && mv "$pc.tmp" "$pc"
    grep -q '^prefix=${pcfiledir}/../..$' "$pc" || die "$pc: no relocatable prefix"
    tar --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner --format=gnu \
        -C "$root" -cf - "$top_dir" | gzip -n -9 > "$work/$name"
    publish "$work/$name" "$name" 1f8b
    ;;
sdist)
    name="detcheck-$version.tar.gz"
    stage "$work/src"
    "$py" -m build --sdist --no-isolation --outdir "$work/out" "$work/src" > "$work/build.log" 2>&1 ||
        { cat "$work/build.log" >&2; die "python -m build --sdist failed"; }
    [ -f "$work/out/$name" ] || die "python -m build wrote $(ls "$work/out"), not $name"
    tar -tzf "$work/out/$name" | grep -q "^detcheck-$version/csrc/include/detcheck.h$" ||
        die "$work/out/$name holds no C tree (python/MANIFEST.in: graft csrc)"
    publish "$work/out/$name" "$name" 1f8b
    ;;
*) die "unknown package '$what' (wheel, dist-tar, sdist)" ;;
esac

#!/bin/sh
# The packages, installed the way users install them (`make package-check`,
# CI's first stage): the wheel and the portable tarball that `make wheel
# dist-tar` write, checked as built, in a fresh venv here with the Debian
# -dev libraries hidden from the loader, and in a bare Debian 11 root
# (bullseye: glibc 2.31, Python 3.9; ci/rootfs.sh). Each row below is one
# function; the summary at the end lists every row as PASS, FAIL or SKIP
# (with why) and the seconds it took. Exit 1 when a row failed.
#
#   build        make all wheel dist-tar (the host's build too: row tar_root
#                verifies its manifest with the tarball's binary)
#   wheel_tag    the wheel's file name and `auditwheel show`: py3-none,
#                manylinux_2_28 or older, x86_64
#   elf_deps     every ELF file of the wheel and the tarball: NEEDED only
#                glibc's libraries, every undefined symbol glibc's, no
#                GLIBC_ symbol version above 2.28,
#                libdetcheck exports only dck_ symbols
#   venv_host    the wheel pip-installed (--no-index) into a fresh venv here,
#                libzstd/libyaml/libjansson/libxxhash (and any installed
#                libdetcheck) hidden from the loader: see venv_checks
#   venv_root    the same in the bullseye root
#   tar_root     the tarball unpacked in the root: bin/detcheck --version,
#                verify of the host build's manifests (same digests across
#                builds), lib/libdetcheck.so.0 loads
#   sdist        pip install of the sdist into a fresh venv here (builds the
#                C sources with make: minutes, so only with
#                DCK_PACKAGE_SDIST=1; skipped otherwise, saying so)
#
# DCK_PACKAGE_DIST=DIR checks the artifacts in DIR as they are (nothing is
# built; row tar_root then needs a host build in $BUILD). Rows that need
# root (the chroot, mount namespaces) skip without it, saying why; the
# fixtures are the public ones ($DCK_PUBLIC_FIXTURES, as tests/cli/lib.sh).
set -u
VENV_LIBS="libzstd libyaml libjansson libxxhash libdetcheck"
GLIBC_LIBS="libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 ld-linux-x86-64.so.2"
GLIBC_MAX=2.28

# ---------------------------------------------------------------- the checks run inside a venv
# venv_checks DIR PYTHON VERSION: DIR holds the wheel (*.whl) and fixtures
# (fix/*; their manifests go to manifests/); makes DIR/venv with PYTHON, installs the wheel with pip
# --no-index, then checks: the CLI is the venv's, numpy is absent,
# `detcheck --version`, `hash` of each fixture, `verify` against that
# manifest (0) and of a copy with one bit changed (1, naming a tensor),
# `diff` (0 same, 1 changed), and detcheck.hash_files in the venv's python
# giving the CLI manifests' names and digests. Runs here and in the root.
venv_checks() {
    dir=$1 py=$2 version=$3
    set -e
    say() { echo "  venv: $*"; }
    die() { echo "  venv: FAILED: $*"; exit 1; }
    "$py" -c 'import platform, sys; print("  venv: python %s, %s %s" % (sys.version.split()[0], *platform.libc_ver()))'
    "$py" -m venv "$dir/venv" || die "$py -m venv"
    "$dir/venv/bin/python" -m pip install -q --no-index --no-cache-dir --disable-pip-version-check "$dir"/*.whl ||
        die "pip install --no-index of the wheel"
    PATH="$dir/venv/bin:$PATH"
    [ "$(command -v detcheck)" = "$dir/venv/bin/detcheck" ] || die "detcheck on PATH is $(command -v detcheck), not the venv's"
    ! python -c "import numpy" 2> /dev/null || die "the venv has numpy: not a bare venv"
    detcheck --version > "$dir/version.txt" || die "detcheck --version"
    grep -q "^detcheck $version" "$dir/version.txt" || die "detcheck --version says $(head -n 1 "$dir/version.txt")"
    python -m detcheck --version | grep -q "^detcheck $version" || die "python -m detcheck --version"
    mkdir "$dir/manifests"
    for f in "$dir"/fix/*; do
        detcheck hash -q --json "$f" -o "$dir/manifests/${f##*/}.json" || die "detcheck hash $f"
        detcheck verify -q --golden "$dir/manifests/${f##*/}.json" "$f" ||
            die "detcheck verify of $f against its manifest: exit $?"
    done
    st=$(ls "$dir"/fix/*.safetensors | head -n 1)
    cp "$st" "$dir/changed.safetensors"
    python -c 'import sys; b = bytearray(open(sys.argv[1], "rb").read()); b[-1] ^= 1; open(sys.argv[1], "wb").write(b)' \
        "$dir/changed.safetensors"
    rc=0; detcheck verify --golden "$dir/manifests/${st##*/}.json" "$dir/changed.safetensors" > "$dir/verify.txt" 2>&1 || rc=$?
    [ $rc = 1 ] || { cat "$dir/verify.txt"; die "verify of a changed copy: exit $rc, not 1"; }
    grep -q "differs" "$dir/verify.txt" || { cat "$dir/verify.txt"; die "verify of a changed copy names no differing tensor"; }
    detcheck diff -q "$st" "$st" > /dev/null || die "detcheck diff of a file with itself: exit $?"
    rc=0; detcheck diff -q "$st" "$dir/changed.safetensors" > /dev/null 2>&1 || rc=$?
    [ $rc = 1 ] || die "detcheck diff of a changed copy: exit $rc, not 1"
    python - "$dir" <<'EOF' || die "detcheck.hash_files against the CLI's manifests"
import json, sys
import detcheck
assert "numpy" not in sys.modules and "torch" not in sys.modules, "import detcheck imported numpy or torch"
assert detcheck.LIB_PATH.startswith(sys.prefix), "libdetcheck from %s, not the venv" % detcheck.LIB_PATH
import os
for name in sorted(os.listdir(sys.argv[1] + "/fix")):
    path = sys.argv[1] + "/fix/" + name
    m = detcheck.hash_files(path)
    with open(sys.argv[1] + "/manifests/" + name + ".json") as f:
        doc = json.load(f)
    cli = {t["name"]: t["digest"] for t in doc["tensors"]}
    ours = {name: t[3] for name, t in m.tensors.items()}
    assert cli and ours == cli, "%s: hash_files %s, CLI %s" % (path, ours, cli)
    assert m.root == doc["root"], path
    print("  venv: %s: %d tensors, root %s, as the CLI" % (name, len(cli), m.root))
EOF
    # detcheck doctor finds a library in the NVIDIA wheels of the venv pip
    # installed it into (its site-packages, found from the executable's own
    # place), and lists that folder among the places tried for what is absent
    sp=$(python -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
    mkdir -p "$sp/nvidia/nccl/lib" && cp "$dir/stub/libnccl.so.2" "$sp/nvidia/nccl/lib/"
    detcheck doctor --json > "$dir/doctor.json" || die "detcheck doctor: exit $?"
    python - "$dir/doctor.json" "$sp" <<'EOF' || die "detcheck doctor in the venv"
import json, sys
rows = {r["key"]: r for r in json.load(open(sys.argv[1]))["rows"]}
sp = sys.argv[2]
n = rows["nccl"]
assert (n["state"], n["from"], n["path"], n["version"]) == (
    "found", "NVIDIA wheel", sp + "/nvidia/nccl/lib/libnccl.so.2", "2.99.7"), n
for key in ("cuda", "cublas"):
    r = rows[key]
    assert r["state"] == "found" or any(w.startswith("NVIDIA wheel: " + sp) for w in r["why"]), r
print("  venv: doctor: NCCL %s from the venv's NVIDIA wheel; CUDA runtime %s" % (n["version"], rows["cuda"]["state"]))
EOF
    say "detcheck $version: hash, verify (0, changed 1), diff (0, 1), hash_files = CLI, doctor"
}

# tar_checks DIR VERSION: unpacks DIR/*.tar.gz in DIR/tar and checks its
# layout, bin/detcheck --version, bin/detcheck verify of DIR/fix/* against
# the host build's manifests DIR/host/*.json (run from another folder:
# nothing depends on the current directory), and that lib/libdetcheck.so.0
# loads into python3.
tar_checks() {
    dir=$1 version=$2
    set -e
    die() { echo "  tar: FAILED: $*"; exit 1; }
    mkdir "$dir/tar"
    tar -xzf "$dir"/*.tar.gz -C "$dir/tar" || die "tar -xzf"
    top="$dir/tar/detcheck-$version"
    for f in bin/detcheck lib/libdetcheck.so.0 include/detcheck.h share/man/man1/detcheck.1 \
             lib/pkgconfig/detcheck.pc share/bash-completion/completions/detcheck; do
        [ -e "$top/$f" ] || die "no $f in the tarball's detcheck-$version/"
    done
    cd /
    "$top/bin/detcheck" --version | grep -q "^detcheck $version" || die "bin/detcheck --version"
    for f in "$dir"/fix/*; do
        "$top/bin/detcheck" verify -q --golden "$dir/host/${f##*/}.json" "$f" ||
            die "bin/detcheck verify of $f against the host build's manifest: exit $?"
    done
    python3 -c 'import ctypes, sys; l = ctypes.CDLL(sys.argv[1]); l.dck_version.restype = ctypes.c_char_p; print("  tar: lib/libdetcheck.so.0", l.dck_version().decode())' \
        "$top/lib/libdetcheck.so.0" || die "lib/libdetcheck.so.0 does not load"
    echo "  tar: bin/detcheck $version verifies the host build's manifests"
}

case ${1:-} in
--venv-checks) shift; venv_checks "$@"; exit 0 ;;
--tar-checks) shift; tar_checks "$@"; exit 0 ;;
esac

# ---------------------------------------------------------------- the rows
top=$(cd "$(dirname "$0")/.." && pwd)
self="$top/ci/package-check.sh"
BUILD=${BUILD:-build}
version_of() { sed -n "s/^.define DCK_VERSION_$1 \([0-9][0-9]*\)\$/\1/p" "$top/include/detcheck.h"; }
VERSION=$(version_of MAJOR).$(version_of MINOR).$(version_of PATCH)
dist=${DCK_PACKAGE_DIST:-$top/dist}
FIX=${DCK_PUBLIC_FIXTURES:-$top/../shared/fixtures/public}
work=$(mktemp -d "${TMPDIR:-/tmp}/package-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
trap 'exit 130' INT TERM

fail() { echo "$*" > "$work/why"; echo "  FAIL: $*" >&2; exit 1; }
skip() { echo "$*" > "$work/why"; echo "  SKIP: $*"; exit 77; }
wheel() {
    set -- "$dist"/detcheck-"$VERSION"-*.whl
    [ -f "$1" ] || fail "no $dist/detcheck-$VERSION-*.whl (make wheel)"
    [ $# = 1 ] || fail "more than one wheel in $dist: $*"
    echo "$1"
}
tarball() {
    t="$dist/detcheck-$VERSION-linux-x86_64.tar.gz"
    [ -f "$t" ] || fail "no $t (make dist-tar)"
    echo "$t"
}
need_root_ns() {
    [ "$(id -u)" -eq 0 ] || skip "not root: mount namespaces and chroot need root"
    unshare -m true 2> /dev/null || skip "unshare -m does not work here (no mount namespace)"
}
# fixtures DIR: a small safetensors file and a torch .pt from the public
# fixtures into DIR/fix (absent: skip, or fail with DCK_REQUIRE_FIXTURES, as
# tests/cli/lib.sh's need_public_fixtures)
# nccl_stub DIR: DIR/stub/libnccl.so.2, a stand-in with every function the
# NCCL loader looks up (src/gpu/cuda_loader.h) and ncclGetVersion 2.99.7,
# for the doctor check of venv_checks (no libc symbol: it loads anywhere)
nccl_stub() {
    mkdir -p "$1/stub"
    { sed -n 's/^ *X(\(nccl[A-Za-z]*\)).*/int \1(void) { return 0; }/p' "$top/src/gpu/cuda_loader.h"
      echo 'int ncclGetVersion(int *v) { *v = 29907; return 0; }'; } > "$1/stub/nccl.c"
    cc -shared -fPIC -nostdlib -Wl,-soname,libnccl.so.2 -o "$1/stub/libnccl.so.2" "$1/stub/nccl.c" ||
        fail "cc of the NCCL stub"
}

fixtures() {
    mkdir -p "$1/fix"
    for f in multi_layer.safetensors checkpoint.pt; do
        if [ ! -f "$FIX/$f" ]; then
            case ${DCK_REQUIRE_FIXTURES:-0} in
            "" | 0) skip "public fixtures $FIX absent (DCK_REQUIRE_FIXTURES=1 makes this a failure)" ;;
            *) fail "no $FIX/$f and DCK_REQUIRE_FIXTURES is set" ;;
            esac
        fi
        cp "$FIX/$f" "$1/fix/"
    done
}
# in_root DIR CMD...: CMD in the bullseye root, DIR mounted at /mnt, /proc
# mounted; both in a mount namespace of their own, so they are gone when
# it ends, however it ends (nothing to unmount, nothing left in the cache)
in_root() {
    r=$(sh "$top/ci/rootfs.sh" bullseye 2> "$work/rootfs.log")
    case $? in
    0) ;;
    77) skip "$(tail -n 1 "$work/rootfs.log")" ;;
    *) cat "$work/rootfs.log"; fail "ci/rootfs.sh bullseye" ;;
    esac
    d=$1; shift
    unshare -m sh -c 'r=$1 d=$2; shift 2
        mount -t proc proc "$r/proc" && mount --bind "$d" "$r/mnt" &&
        exec chroot "$r" /usr/bin/env -i HOME=/mnt TMPDIR=/mnt PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 "$@"' \
        sh "$r" "$d" "$@"
}

row_build() {
    [ -z "${DCK_PACKAGE_DIST:-}" ] || skip "DCK_PACKAGE_DIST=$DCK_PACKAGE_DIST: its artifacts as they are"
    make -C "$top" --no-print-directory -s all wheel dist-tar || fail "make all wheel dist-tar"
}

row_wheel_tag() {
    w=$(wheel) || exit 1
    name=${w##*/}
    case $name in
    detcheck-$VERSION-py3-none-*_x86_64.whl) ;;
    *) fail "$name: not detcheck-$VERSION-py3-none-PLATFORM_x86_64.whl" ;;
    esac
    plat=${name#detcheck-$VERSION-py3-none-}
    check_tags "the file name" "${plat%.whl}" || exit 1
    py=$(sh "$top/ci/venv.sh" wheel) || fail "sh ci/venv.sh wheel (auditwheel)"
    "$py" -m auditwheel show "$w" > "$work/auditwheel.txt" 2>&1 || { cat "$work/auditwheel.txt"; fail "auditwheel show"; }
    tag=$(tr '\n' ' ' < "$work/auditwheel.txt" | sed -n 's/.*platform tag: *"\([^"]*\)".*/\1/p')
    [ -n "$tag" ] || { cat "$work/auditwheel.txt"; fail "auditwheel show names no platform tag"; }
    check_tags "auditwheel show" "$tag" || exit 1
    echo "  $name; auditwheel show: $tag"
}
# check_tags WHAT TAGS: every platform tag of TAGS (dot-separated) is
# manylinux_2_N_x86_64 with N <= 28 (or its legacy alias)
check_tags() {
    for t in $(echo "$2" | tr . ' '); do
        case $t in
        manylinux1_x86_64) n=5 ;;
        manylinux2010_x86_64) n=12 ;;
        manylinux2014_x86_64) n=17 ;;
        manylinux_2_*_x86_64) n=${t#manylinux_2_}; n=${n%_x86_64} ;;
        *) fail "$1: platform tag $t, not manylinux_2_N_x86_64" ;;
        esac
        [ "$n" -le 28 ] 2> /dev/null || fail "$1: $t is newer than manylinux_2_28 (RHEL 8)"
    done
}

row_elf_deps() {
    w=$(wheel) || exit 1
    t=$(tarball) || exit 1
    mkdir "$work/elf" "$work/elf/whl" "$work/elf/tar"
    python3 -m zipfile -e "$w" "$work/elf/whl" || fail "unzip $w"
    tar -xzf "$t" -C "$work/elf/tar" || fail "tar -xzf $t"
    n=0
    for f in $(find "$work/elf" -type f | sort); do
        [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
        n=$((n + 1))
        rel=${f#"$work/elf/"}
        readelf -h "$f" | grep -q 'Machine: *Advanced Micro Devices X86-64' || fail "$rel: not x86-64"
        for lib in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
            case " $GLIBC_LIBS " in
            *" $lib "*) ;;
            *) fail "$rel needs $lib (only glibc's libraries: $GLIBC_LIBS)" ;;
            esac
        done
        # every symbol it takes from elsewhere is glibc's (versioned GLIBC_):
        # an unversioned one (jansson's, zstd's) would be a library left out
        missing=$(nm -D --undefined-only "$f" | awk '$1 == "U" && $2 !~ /@GLIBC_[0-9.]+$/ { print $2 }')
        [ -z "$missing" ] || fail "$rel takes symbols no glibc library defines: $(echo $missing | cut -c1-200)"
        top_glibc=$(objdump -T "$f" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -t. -k1,1n -k2,2n -k3,3n -u | tail -n 1)
        [ -n "$top_glibc" ] || fail "$rel: no GLIBC_ symbol version (objdump -T)"
        newest=$(printf '%s\n%s\n' "$top_glibc" "$GLIBC_MAX" | sort -t. -k1,1n -k2,2n -k3,3n | tail -n 1)
        [ "$newest" = "$GLIBC_MAX" ] || fail "$rel needs GLIBC_$top_glibc (at most $GLIBC_MAX)"
        case ${f##*/} in
        libdetcheck.so*)
            others=$(nm -D --defined-only "$f" | awk '{print $NF}' | grep -v '^dck_' | grep -v '^$' || true)
            [ -z "$others" ] || fail "$rel exports more than dck_ symbols: $(echo $others | cut -c1-200)"
            ;;
        esac
        echo "  $rel: NEEDED $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')GLIBC_$top_glibc"
    done
    for want in "whl/detcheck-$VERSION.data/scripts/detcheck" whl/detcheck/_native/libdetcheck.so.0 \
                "tar/detcheck-$VERSION/bin/detcheck"; do
        [ -f "$work/elf/$want" ] || fail "no $want"
    done
}

row_venv_host() {
    need_root_ns
    w=$(wheel) || exit 1
    d="$work/host"
    mkdir "$d"
    cp "$w" "$d/"
    fixtures "$d"
    nccl_stub "$d"
    # the real files of the -dev libraries (and of an installed libdetcheck)
    # (libyaml's soname is libyaml-0.so.2)
    hide=$(ldconfig -p | awk -v libs="$VENV_LIBS" '
        BEGIN { n = split(libs, l, " ") }
        { for (i = 1; i <= n; i++) if ($1 ~ ("^" l[i] "(-[0-9.]+)?[.]so")) print $NF }' | xargs -r readlink -f | sort -u)
    [ -n "$hide" ] || echo "  none of $VENV_LIBS is installed here: nothing to hide"
    unset DETCHECK DETCHECK_LIB LD_LIBRARY_PATH PYTHONPATH PYTHONHOME VIRTUAL_ENV
    unshare -m sh -c 'hide=$1; shift
        for f in $hide; do
            mount --bind /dev/null "$f" || exit 1
            # the proof that it is hidden: the loader cannot load it
            if python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1])" "$f" 2> /dev/null; then
                echo "  $f still loads: not hidden"; exit 1
            fi
        done
        echo "  hidden (/dev/null mounted over them):" $hide
        exec "$@"' sh "$hide" sh "$self" --venv-checks "$d" python3 "$VERSION" ||
        fail "the wheel in a fresh venv here"
}

row_venv_root() {
    need_root_ns
    w=$(wheel) || exit 1
    d="$work/root"
    mkdir "$d"
    cp "$w" "$self" "$d/"
    fixtures "$d"
    nccl_stub "$d"
    in_root "$d" sh /mnt/package-check.sh --venv-checks /mnt python3 "$VERSION" ||
        fail "the wheel in a venv of the bullseye root"
}

row_tar_root() {
    need_root_ns
    t=$(tarball) || exit 1
    host_bin="$top/$BUILD/detcheck"
    [ -x "$host_bin" ] || fail "no host build $host_bin (make all)"
    d="$work/tarroot"
    mkdir "$d"
    cp "$t" "$self" "$d/"
    fixtures "$d"
    mkdir "$d/host"
    for f in "$d"/fix/*; do
        "$host_bin" hash -q --json "$f" -o "$d/host/${f##*/}.json" || fail "$host_bin hash $f"
    done
    in_root "$d" sh /mnt/package-check.sh --tar-checks /mnt "$VERSION" ||
        fail "the tarball in the bullseye root"
}

row_sdist() {
    [ "${DCK_PACKAGE_SDIST:-0}" = 1 ] ||
        skip "pip install of the sdist builds the C sources (minutes): DCK_PACKAGE_SDIST=1 runs it"
    s="$dist/detcheck-$VERSION.tar.gz"
    [ -n "${DCK_PACKAGE_DIST:-}" ] || make -C "$top" --no-print-directory -s sdist || fail "make sdist"
    [ -f "$s" ] || fail "no $s (make sdist)"
    python3 -m venv "$work/sdist" || fail "python3 -m venv"
    "$work/sdist/bin/python" -m pip install -q --disable-pip-version-check "$s" > "$work/sdist.log" 2>&1 ||
        { tail -n 30 "$work/sdist.log"; fail "pip install $s"; }
    fixtures "$work/sdist"
    PATH="$work/sdist/bin:$PATH" python -c 'import sys, detcheck
assert detcheck.LIB_PATH.startswith(sys.prefix), "libdetcheck from %s, not the venv" % detcheck.LIB_PATH
print("  sdist:", detcheck.hash_files(sys.argv[1]))' \
        "$work/sdist/fix/multi_layer.safetensors" || fail "detcheck.hash_files after pip install of the sdist"
    PATH="$work/sdist/bin:$PATH" detcheck --version || fail "detcheck --version after pip install of the sdist"
}

# ---------------------------------------------------------------- the table of rows
ROWS="build wheel_tag elf_deps venv_host venv_root tar_root sdist"
: > "$work/summary"
failed=0
t0=$(date +%s)
for row in $ROWS; do
    echo "== $row"
    rm -f "$work/why"
    s=$(date +%s)
    (set -u; "row_$row")
    rc=$?
    secs=$(($(date +%s) - s))
    case $rc in
    0) res=PASS why= ;;
    77) res=SKIP why=$(cat "$work/why" 2> /dev/null) ;;
    *) res=FAIL why=$(cat "$work/why" 2> /dev/null) failed=1 ;;
    esac
    printf '%-4s %-10s %4ss %s\n' "$res" "$row" "$secs" "$why" >> "$work/summary"
done
echo "== package-check summary ($(($(date +%s) - t0))s)"
cat "$work/summary"
exit $failed

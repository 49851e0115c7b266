#!/bin/sh
# Prints the path of a Debian root made with debootstrap from deb.debian.org,
# holding only what an ML engineer's bare machine has: python3, python3-venv
# and python3-pip (the packages' tests run the wheel and the tarball there,
# ci/package-check.sh):
#
#   sh ci/rootfs.sh bullseye    Debian 11: glibc 2.31, Python 3.9
#
# The root lives outside the clone, keyed by suite and package list, so a
# second run reuses it:
# ${DCK_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/detcheck}/root-SUITE-KEY.
# It is made under a temporary name and renamed when debootstrap succeeded,
# so an interrupted run never leaves a half root as the cache.
# debootstrap is installed with apt-get when missing.
#
# Messages go to stderr. Exit 77 (skip) when this cannot be done here (not
# root: debootstrap and chroot need it; no debootstrap to be had), exit 2
# when debootstrap fails.
set -e
suite=${1:?usage: ci/rootfs.sh bullseye}
case $suite in
bullseye) ;;
*) echo "ci/rootfs.sh: unknown suite '$suite' (bullseye)" >&2; exit 2 ;;
esac
mirror=http://deb.debian.org/debian
include=python3,python3-venv,python3-pip
[ "$(id -u)" -eq 0 ] || { echo "ci/rootfs.sh: not root: debootstrap and chroot need root" >&2; exit 77; }
key=$(printf '%s %s %s' "$suite" "$include" "$mirror" | cksum | cut -d' ' -f1)
cache=${DCK_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/detcheck}
dir="$cache/root-$suite-$key"
mkdir -p "$cache"
# one maker at a time (two runs would debootstrap into the same temporary
# folder); the second finds the root made
exec 9> "$dir.lock"
flock 9
if [ -x "$dir/usr/bin/python3" ]; then echo "$dir"; exit 0; fi
if ! command -v debootstrap > /dev/null 2>&1 && [ ! -x /usr/sbin/debootstrap ]; then
    echo "ci/rootfs.sh: installing debootstrap" >&2
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap ||
      { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap; }
    } > /dev/null 2>&1 ||
        { echo "ci/rootfs.sh: no debootstrap (apt-get install debootstrap failed)" >&2; exit 77; }
fi
PATH=$PATH:/usr/sbin:/sbin
echo "ci/rootfs.sh: making $dir (debootstrap $suite from $mirror, $include)" >&2
tmp="$dir.tmp"
rm -rf "$tmp" "$tmp.log"
trap 'rm -rf "$tmp" "$tmp.log"' EXIT
debootstrap --variant=minbase --include=$include "$suite" "$tmp" "$mirror" > "$tmp.log" 2>&1 || {
    tail -n 20 "$tmp.log" >&2
    echo "ci/rootfs.sh: debootstrap $suite failed (log above)" >&2
    exit 2
}
rm -f "$tmp.log"
rm -rf "$tmp/var/cache/apt/archives"/*.deb
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir"

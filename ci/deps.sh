#!/bin/sh
# Installs the Debian packages detcheck builds and tests against, when missing.
#   ci/deps.sh              install what is missing (apt-get)
#   ci/deps.sh --if-missing the same, silent when nothing is missing
set -e
PKGS="build-essential pkg-config python3 libxxhash-dev xxhash libzstd-dev zstd libyaml-dev check libjansson-dev zlib1g-dev libopenmpi-dev openmpi-bin"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    [ "$1" = "--if-missing" ] || echo "deps: all present"
    exit 0
fi
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing

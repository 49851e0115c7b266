#!/bin/sh
# Installs the Debian packages detcheck builds and tests against that are
# missing (apt-get; sudo when not root). Silent when none is. `make deps` and
# every make target that needs packages (check, demo, bench, fuzz) run it.
set -e
PKGS="build-essential pkg-config python3 libxxhash-dev xxhash libzstd-dev zstd libyaml-dev check libjansson-dev zlib1g-dev libopenmpi-dev openmpi-bin libxml2-utils python3-yaml zsh"
# a single-node Slurm cluster for tests/cli/test_slurm.sh (started and
# stopped by the test itself; the packages' own services are not used)
PKGS="$PKGS slurmctld slurmd slurm-client munge"
# the --html pages: validated by tidy, rendered by headless Chromium, the
# PNG read back with PIL (tests/cli/html_lib.sh)
PKGS="$PKGS tidy chromium python3-pil"
# the portable build and the packages (make portable, wheel): the static
# libraries come with the -dev packages above, zig and the packaging tools
# with `sh ci/venv.sh wheel` (python3 -m venv); objcopy is binutils'
PKGS="$PKGS python3-venv binutils"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing

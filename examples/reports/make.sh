#!/bin/sh
# Regenerates the example pages in examples/reports/ and their renderings:
#   sh examples/reports/make.sh [BUILD]     (after make BUILD=... all tests-built)
# Each make_KIND.sh writes its pages into a folder from a small, realistic
# case; each page is rendered by headless Chromium (Debian's chromium) to a
# PNG of the top of the page (1100 px wide), the picture README.md shows.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
DETCHECK=${DETCHECK:-$top/$BUILD/detcheck}
export DETCHECK OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$top/examples/reports
# a fixed folder: the pages name their runs' folders, and a random name
# would change every committed page at each regeneration
tmp=${TMPDIR:-/tmp}/detcheck-examples
rm -rf "$tmp" && mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/pages"
sh "$out/make_diff.sh" "$tmp/pages"
sh "$out/make_runs.sh" "$tmp/pages"
sh "$out/make_canary.sh" "$tmp/pages" "$top/$BUILD/tests/html_canary_synth"
for f in "$tmp"/pages/*.html; do
    name=$(basename "$f" .html)
    cp "$f" "$out/$name.html"
    chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
        --user-data-dir="$tmp/profile" --force-device-scale-factor=1 --force-color-profile=srgb \
        --window-size=1100,1400 --screenshot="$out/$name.png" "file://$out/$name.html" > /dev/null 2>&1
    echo "examples/reports/$name.html ($(wc -c < "$out/$name.html") bytes) -> $name.png"
done

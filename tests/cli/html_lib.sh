# Helpers for the tests of --html pages, sourced after lib.sh:
#   html_check FILE            the page is one file we wrote (magic), needs
#                              nothing from elsewhere (no src/href to a URL, no
#                              <script>, no @import), is ASCII, and validates
#                              with tidy (HTML5; exit 0: no warning, no error)
#   html_render FILE PNG [W H] headless Chromium renders it (W x H CSS pixels,
#                              default 1200 x 1600, device scale 1); returns 1
#                              after skip_part when Chromium cannot run here
#   png_boxes PNG COLOUR       regions of that exact colour (png_probe.py boxes)
#   png_count PNG COLOUR       pixels of that colour
# Chromium and tidy come from Debian (ci/deps.sh installs chromium, tidy and
# python3-pil); a test that renders skips that part with the reason when
# Chromium is absent or cannot start, never passes it silently.

HTML_PY=""
for p in python3 /usr/bin/python3; do
    if command -v "$p" > /dev/null 2>&1 && "$p" -c "import PIL" 2> /dev/null; then HTML_PY=$p; break; fi
done

html_check() {
    f=$1
    head -c 200 "$f" | grep -q "^<!-- detcheck report" || { head -c 200 "$f"; fail "$f: not a detcheck page"; }
    LC_ALL=C grep -q '[^[:print:][:space:]]' "$f" && fail "$f: bytes that are not printable ASCII"
    grep -Eqi '<script|@import|(src|href) *= *"?(https?:)?//' "$f" && fail "$f: refers to something outside the page"
    command -v tidy > /dev/null 2>&1 || fail "tidy is not installed (ci/deps.sh installs it): cannot validate $f"
    set +e
    tidy -q -e --show-warnings yes --drop-empty-elements no "$f" > tidy.txt 2>&1
    rc=$?
    set -e
    [ "$rc" -eq 0 ] || { head -40 tidy.txt; fail "$f does not validate (tidy exit $rc)"; }
    ok
}

html_render() {
    f=$1 png=$2 w=${3:-1200} h=${4:-1600}
    chrome=""
    for c in chromium chromium-browser google-chrome; do
        command -v "$c" > /dev/null 2>&1 && { chrome=$c; break; }
    done
    if [ -z "$chrome" ]; then skip_part "Chromium is not installed: $f not rendered"; return 1; fi
    if [ -z "$HTML_PY" ]; then skip_part "no python3 with PIL (python3-pil): $png not read"; return 1; fi
    rm -f "$png"
    # its own profile: tests run in parallel; --no-sandbox: CI runs as root
    set +e
    timeout 120 "$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
        --user-data-dir="$TESTTMP/chromium-profile" --force-device-scale-factor=1 \
        --force-color-profile=srgb --window-size="$w,$h" --screenshot="$png" \
        "file://$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" > chromium.txt 2>&1
    rc=$?
    set -e
    if [ ! -s "$png" ]; then
        tail -5 chromium.txt
        if [ "$rc" -eq 0 ]; then fail "Chromium wrote no picture of $f"; fi
        skip_part "Chromium cannot run here (exit $rc; last line: $(tail -1 chromium.txt | cut -c1-120))"
        return 1
    fi
    ok
}

png_boxes() { "$HTML_PY" "$DCK_TOP/tests/cli/png_probe.py" "$1" boxes "$2"; }
png_count() { "$HTML_PY" "$DCK_TOP/tests/cli/png_probe.py" "$1" count "$2"; }

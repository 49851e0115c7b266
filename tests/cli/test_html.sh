# CLI: the frame every --html page shares (report/html.c, report/report.c): one
# self-contained ASCII file that validates, written atomically under the
# rule of every output (never an input, never a file of another kind; its
# own earlier page replaced), names from files escaped, the verdict stated as
# the exit status says, and a rendering that shows the verdict badge. The
# figures of each command have their own tests (test_html_diff.sh,
# test_html_runs.sh, test_html_canary.sh).
. "$DCK_TOP/tests/cli/lib.sh"
. "$DCK_TOP/tests/cli/html_lib.sh"

# mk FILE SCALE NAME...: F32 tensors [1.0, 2.0 * SCALE, 3.0] under raw names
# given as Python byte-string literals
mk() {
python3 - "$@" <<'PY'
import ast, json, struct, sys
path, scale, names = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
hdr, data = {}, b""
for n in names:
    name = ast.literal_eval(n).decode("utf-8", "surrogateescape")
    b = struct.pack("<3f", 1.0, 2.0 * scale, 3.0)
    hdr[name] = {"dtype": "F32", "shape": [3], "data_offsets": [len(data), len(data) + len(b)]}
    data += b
h = json.dumps(hdr, ensure_ascii=False).encode("utf-8", "surrogateescape")
open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
}
mk a.safetensors 1 "b'model.layers.0.w'" "b'model.layers.1.w'"
mk b.safetensors 1.5 "b'model.layers.0.w'" "b'model.layers.1.w'"
mk c.safetensors 1 "b'model.layers.0.w'" "b'model.layers.1.w'"

# ---- a page, and its verdict as the exit status says
expect_exit 1 "$DETCHECK" diff --html page.html a.safetensors b.safetensors
html_check page.html
expect_grep '<title>detcheck diff: DIFFERENT</title>' page.html
expect_grep 'class="v">DIFFERENT<' page.html
expect_exit 0 "$DETCHECK" diff --html same.html a.safetensors c.safetensors
html_check same.html
expect_grep 'class="v">OK<' same.html
# the text output is the same with and without a page
"$DETCHECK" diff a.safetensors b.safetensors > plain.txt || true
"$DETCHECK" diff --html again.html a.safetensors b.safetensors > with.txt || true
cmp -s plain.txt with.txt || fail "--html changed what diff prints"
ok

# ---- the rule of every output
cp a.safetensors keep.safetensors
expect_exit 2 "$DETCHECK" diff --html a.safetensors a.safetensors b.safetensors
expect_grep "a.safetensors" err.txt
cmp -s a.safetensors keep.safetensors || fail "an input was replaced by a page"
ok
echo "my notes" > notes.html
expect_exit 2 "$DETCHECK" diff --html notes.html a.safetensors b.safetensors
expect_grep "notes.html" err.txt
expect_grep "HTML report" err.txt
[ "$(cat notes.html)" = "my notes" ] || fail "a file that is no detcheck page was replaced"
ok
# its own earlier page is replaced (same.html said OK; now DIFFERENT)
expect_exit 1 "$DETCHECK" diff --html same.html a.safetensors b.safetensors
expect_grep 'class="v">DIFFERENT<' same.html
# no temporary file left beside it
ls -a | grep -q '\.tmp' && { ls -a; fail "a temporary file was left behind"; }
ok
expect_exit 2 "$DETCHECK" diff --html new.html --junit new.html a.safetensors b.safetensors
expect_grep "same file" err.txt
expect_exit 2 "$DETCHECK" diff --json --html - a.safetensors b.safetensors
expect_grep "standard output" err.txt
expect_exit 2 "$DETCHECK" diff --markdown - --html - a.safetensors b.safetensors
expect_grep "standard output" err.txt
expect_exit 2 "$DETCHECK" diff --html a.safetensors b.safetensors
mkdir adir
expect_exit 2 "$DETCHECK" diff --html adir a.safetensors b.safetensors
expect_grep "adir" err.txt
ln -s page.html link.html
expect_exit 2 "$DETCHECK" diff --html link.html a.safetensors b.safetensors
expect_grep "link.html" err.txt
# to standard output: the page alone after the table
expect_exit 1 "$DETCHECK" diff -q --html - a.safetensors b.safetensors
expect_grep '^<!-- detcheck report diff -->' out.txt
# a folder that cannot be written: trouble, naming the page
if [ "$(id -u)" -ne 0 ]; then
    mkdir ro && chmod 555 ro
    expect_exit 2 "$DETCHECK" diff --html ro/p.html a.safetensors b.safetensors
    expect_grep "ro/p.html" err.txt
    chmod 755 ro
fi

# ---- names from files: escaped, one-to-one, and the page still validates
odd="b'model.layers.0.<b>&\"q\\'\\x01\\xc3\\xa9\\\\tail\\xc2\\x85\\xef\\xbf\\xbe'"
mk oa.safetensors 1 "$odd" "b'model.layers.1.w'"
mk ob.safetensors 2 "$odd" "b'model.layers.1.w'"
expect_exit 1 "$DETCHECK" diff --html odd.html oa.safetensors ob.safetensors
html_check odd.html
expect_grep 'model.layers.0.&lt;b&gt;&amp;&quot;q&#39;\\x01&#xe9;\\\\tail\\u{0085}\\u{fffe}' odd.html
expect_no_grep '<b>&' odd.html
# a path is any bytes: not UTF-8, a control character (the page's properties)
bad=$(printf 'p\377\033[31m.safetensors')
cp ob.safetensors "$bad"
expect_exit 1 "$DETCHECK" diff --html path.html oa.safetensors "$bad"
html_check path.html
expect_grep 'p\\xff\\x1b\[31m.safetensors' path.html

# ---- the committed examples (examples/reports/make.sh) are pages that validate
for k in diff verify bisect repro resume-check canary; do
    [ -f "$DCK_TOP/examples/reports/$k.html" ] || fail "examples/reports/$k.html is missing"
    [ -f "$DCK_TOP/examples/reports/$k.png" ] || fail "examples/reports/$k.png is missing"
    cp "$DCK_TOP/examples/reports/$k.html" "example-$k.html"
    html_check "example-$k.html"
done

# ---- the picture: Chromium renders the page with the verdict badge
if html_render page.html page.png 900 700; then
    n=$(png_count page.png '#a40000')
    [ "$n" -gt 100 ] || fail "the DIFFERENT badge is not drawn (pixels of #a40000: $n)"
    ok
    expect_exit 0 "$DETCHECK" diff --html ok.html a.safetensors c.safetensors
    html_render ok.html ok.png 900 700
    [ "$(png_count ok.png '#a40000')" -eq 0 ] || fail "an OK page shows the DIFFERENT badge"
    [ "$(png_count ok.png '#e8f4ea')" -gt 100 ] || fail "the OK badge is not drawn"
    ok
fi
done_ok

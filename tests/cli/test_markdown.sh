# --markdown FILE (or -) on verify and diff: a summary for
# $GITHUB_STEP_SUMMARY or a merge-request note: the verdict, the counts, a
# table row per failure naming the tensor and what differs. A name cannot
# break the table or inject markup: Markdown's punctuation is escaped,
# control characters are \xNN. Written atomically; a bad path is exit 2.
. "$DCK_TOP/tests/cli/lib.sh"
mk() {
python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, variant = sys.argv[1], sys.argv[2]
names = ["model.layers.0.pipe|in|name.weight", "model.layers.1.<b>*bold*</b>`code`[link](x).weight",
         "model.layers.2.ctl\n| fake | row |.weight", "model.layers.3.same.weight"]
hdr, data, pos = {}, bytearray(), 0
for k, name in enumerate(names):
    vals = [float(k + i) for i in range(4)]
    if variant == "b" and k < 3:
        vals[1] = -vals[1] - 1
    hdr[name] = {"dtype": "F32", "shape": [4], "data_offsets": [pos, pos + 16]}
    data += struct.pack("<4f", *vals)
    pos += 16
h = json.dumps(hdr).encode()
open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
}
mk a.safetensors a
mk b.safetensors b
expect_exit 0 "$DETCHECK" hash -q -o a.yaml a.safetensors

# the table's shape: every row has as many cells as its header, counting
# only unescaped pipes; no raw markup survives. A test, can fail:
table_ok() {
    python3 - "$1" <<'PY'
import re, sys
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
def cells(l):
    return len(re.findall(r"(?<!\\)\|", l)) - 1
width = None
for l in lines:
    if l.startswith("|"):
        if width is None:
            width = cells(l)
        assert cells(l) == width, (width, l)
    else:
        width = None
        assert "|" not in re.sub(r"\\\|", "", l), l
text = "\n".join(lines)
for raw in ("<b>", "*bold*", "`code`", "[link](x)", "\n| fake"):
    assert raw not in text, raw
PY
}
printf '| a | b |\n| --- | --- |\n| x | y | z |\n' > broken.md
! table_ok broken.md 2> /dev/null || fail "table_ok takes a row with an extra cell"
ok

expect_exit 1 "$DETCHECK" verify --golden a.yaml b.safetensors --markdown v.md -q
table_ok v.md || { cat v.md; fail "v.md: table"; }
ok
expect_grep '^### :x: detcheck verify: DIFFERENT$' v.md
expect_grep '^| 4 | 1 | 3 | 0 | 0 |$' v.md
expect_grep '^| :x: | model.layers.0.pipe\\|in\\|name.weight | digest [0-9a-f]\{32\} in the checkpoint' v.md
expect_grep 'model.layers.2.ctl\\\\x0a\\| fake \\| row \\|.weight' v.md
expect_grep '\\<b\\>\\\*bold\\\*\\</b\\>\\`code\\`\\\[link\\\]\\(x\\)' v.md

# "-": standard output, after the usual report
expect_exit 0 "$DETCHECK" verify --golden a.yaml a.safetensors --markdown -
expect_grep '^OK: 4 tensors identical' out.txt
expect_grep '^### :white_check_mark: detcheck verify: OK$' out.txt
expect_grep '^| 4 | 4 | 0 | 0 | 0 |$' out.txt

# diff: element figures in the rows
expect_exit 1 "$DETCHECK" diff a.safetensors b.safetensors --markdown=d.md
table_ok d.md || { cat d.md; fail "d.md: table"; }
ok
expect_grep '^3 of 4 tensors differ$' d.md
expect_grep 'name.weight | 1 of 4 elements differ; max abs 3, max rel 1.5, max ULP' d.md

# the summary file of GitHub Actions (as gate.sh passes it): every command of
# a step appends to it (GitHub's contract), so the report is appended and
# what an earlier command wrote stays; any other existing file that is not a
# detcheck summary is refused (tests/cli/test_outputs.sh)
export GITHUB_STEP_SUMMARY="$TESTTMP/step_summary"
echo "earlier step output" > "$GITHUB_STEP_SUMMARY"
expect_exit 1 "$DETCHECK" verify --golden a.yaml b.safetensors --markdown "$GITHUB_STEP_SUMMARY" -q
expect_grep '^earlier step output$' "$GITHUB_STEP_SUMMARY"
expect_grep 'DIFFERENT' "$GITHUB_STEP_SUMMARY"
[ "$(grep -c 'detcheck verify' "$GITHUB_STEP_SUMMARY")" -eq 1 ] || fail "one summary expected"
expect_exit 1 "$DETCHECK" verify --golden a.yaml b.safetensors --markdown "$GITHUB_STEP_SUMMARY" -q
[ "$(grep -c 'detcheck verify' "$GITHUB_STEP_SUMMARY")" -eq 2 ] || fail "the second summary is appended"
ok
echo "stale" > other.md
expect_exit 2 "$DETCHECK" verify --golden a.yaml b.safetensors --markdown other.md -q
expect_grep 'other.md exists and is not a detcheck Markdown report' err.txt
expect_grep '^stale$' other.md
unset GITHUB_STEP_SUMMARY
expect_exit 2 "$DETCHECK" diff a.safetensors b.safetensors --markdown nodir/x.md
expect_grep 'report nodir/x.md' err.txt
done_ok

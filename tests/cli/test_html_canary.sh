# CLI: canary's --html page (html_canary.c) and its reports (cmd_canary.c).
# A real 4-rank run with one injected fault: the page validates, the exit
# status is unchanged, and in the rendered picture the only "differs" cell is
# the injected rank's, at its place in the hosts x devices grid. A synthetic
# report of 1,024 ranks (tests/html_canary_synth.c, through the same report
# code) on 128 hosts of 8 GPUs, and on 1,024 hosts of one: one differing,
# one timed-out and one failed rank, each drawn at its place, the 1,021
# others identical, every cell titled with its rank, host and bus id, odd host
# names escaped. The rule of every output (never an input, never a file of
# another kind; its own earlier page replaced) and only rank 0 writes.
. "$DCK_TOP/tests/cli/lib.sh"
. "$DCK_TOP/tests/cli/html_lib.sh"
export ASAN_OPTIONS=detect_leaks=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

SYNTH="$DCK_TOP/${BUILD:-build}/tests/html_canary_synth"
[ -x "$SYNTH" ] || fail "$SYNTH is not built (make tests-built builds it)"

# grid.py PNG: the cells of the canary grid in a rendered page. Cells are
# the regions of the marks' exact fills (a shape drawn on a cell may split
# its fill: regions that touch are one cell); the topmost of each fill is
# the legend's swatch (14 x 14, checked). Prints
#   grid ROWS BLOCKS COLUMNS CELLW CELLH RIGHT BOTTOM
# then one line per cell: STATE ROW COLUMN, ROW counting down the blocks of
# rows in turn (the grid's row, i.e. the host in order of first rank).
cat > grid.py <<'PY'
import os, sys
sys.path.insert(0, os.path.join(os.environ["DCK_TOP"], "tests", "cli"))
from png_probe import pixels, regions as probe_regions
from PIL import Image
FILLS = {"identical": (0xa6, 0xd5, 0xf0), "differs": (0xd5, 0x5e, 0x00),
         "failed": (0x3d, 0x3d, 0x3d), "timeout": (0xe6, 0x9f, 0x00)}
img = Image.open(sys.argv[1]).convert("RGB")
found = pixels(img, FILLS.values())
where = {k: found[v] for k, v in FILLS.items()}
def regions(pts):
    return [list(b[:4]) for b in probe_regions(pts)]
def merge(boxes):
    # regions whose boxes overlap are parts of one cell (a clock's face)
    boxes = [list(b) for b in boxes]
    changed = True
    while changed:
        changed = False
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                a, b = boxes[i], boxes[j]
                if a[0] <= b[2] and b[0] <= a[2] and a[1] <= b[3] and b[1] <= a[3]:
                    boxes[i] = [min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])]
                    del boxes[j]
                    changed = True
                    break
            if changed:
                break
    return boxes
cells = []
for k in FILLS:
    # anti-aliased text makes specks of grey: a cell is at least 5 x 5
    bs = [b for b in merge(regions(where[k])) if b[2] - b[0] >= 4 and b[3] - b[1] >= 4]
    bs.sort(key=lambda b: (b[1], b[0]))
    if not bs or (bs[0][2] - bs[0][0] + 1, bs[0][3] - bs[0][1] + 1) != (14, 14):
        sys.exit("no 14 x 14 legend swatch of %s first: %s" % (k, bs[:1]))
    cells += [(k, b) for b in bs[1:]]
if not cells:
    sys.exit("no cells")
sizes = set((b[2] - b[0] + 1, b[3] - b[1] + 1) for _, b in cells)
if len(sizes) != 1:
    sys.exit("cells of several sizes: %s" % sorted(sizes))
cw, ch = sizes.pop()
xs = sorted(set(b[0] for _, b in cells))
ys = sorted(set(b[1] for _, b in cells))
# the pitch of rows (cells are square): columns farther apart are blocks
pitch = min([b - a for a, b in zip(ys, ys[1:])] or [b - a for a, b in zip(xs, xs[1:])] or [cw + 2])
blocks = [[xs[0]]]
for x in xs[1:]:
    if x - blocks[-1][-1] > 2 * pitch:
        blocks.append([x])
    else:
        blocks[-1].append(x)
ncols = max(len(b) for b in blocks)
print("grid", len(ys), len(blocks), ncols, cw, ch, max(b[2] for _, b in cells), max(b[3] for _, b in cells))
for k, b in cells:
    bi = next(i for i, bl in enumerate(blocks) if b[0] in bl)
    # a block's columns start at its first cell's x: a short last row still lines up
    col = (b[0] - blocks[bi][0]) // pitch
    print(k, bi * len(ys) + ys.index(b[1]), col)
PY
# cells PNG: grid.py's answer in cells.txt; false (after skip_part) without
# a picture
cells() {
    "$HTML_PY" grid.py "$1" > cells.txt 2> grid.err || { cat grid.err; fail "$1: no canary grid found"; }
    ok
}
# expect_cells STATE "ROW COL..." : exactly those cells of that state
expect_cells() {
    got=$(awk -v s="$1" '$1 == s { print $2 " " $3 }' cells.txt | sort -n | tr '\n' ' ')
    want=""
    [ -z "$2" ] || want=$(printf '%s\n' $2 | paste -d' ' - - | sort -n | tr '\n' ' ')
    [ "$got" = "$want" ] || { head -1 cells.txt; fail "$1 cells at '$got', wanted '$want'"; }
    ok
}

# ---- a real run: 4 ranks, one flipped bit on rank 2
if command -v mpirun > /dev/null 2>&1; then
    MPI="mpirun --oversubscribe -np 4"
    spec=2:3:grad.blocks.0.mlp.fc.weight:5:7
    expect_exit 1 $MPI "$DETCHECK" canary --inject $spec
    cp out.txt plain.txt
    expect_exit 1 $MPI "$DETCHECK" canary --inject $spec --html run.html --junit run.xml
    # the same text, the same exit status, with a page
    cmp -s plain.txt out.txt || { diff plain.txt out.txt; fail "--html changed what canary prints"; }; ok
    html_check run.html
    expect_grep 'class="v">DIFFERENT<' run.html
    expect_grep '<p class="title">3 of 4 devices identical</p>' run.html
    expect_grep '<dt>oracle</dt><dd>CPU reference on rank 0</dd>' run.html
    expect_grep '<title>rank 2 on [^<]*, local 2, device cpu [^<]*, bus id cpus [^<]*: differs at step 3: grad.blocks.0.mlp.fc.weight, 1 of [0-9]* elements differ, bits 0x00000080 (bit 7)</title>' run.html
    [ "$(grep -o '<title>rank [0-9] on [^<]*: identical</title>' run.html | wc -l)" -eq 3 ] || fail "not 3 identical cells titled"; ok
    expect_grep 'testcase classname="detcheck.canary" name="rank 2"' run.xml
    expect_grep 'failures="1" errors="0"' run.xml
    if html_render run.html run.png 1200 1200; then
        cells run.png
        expect_grep '^grid 1 1 4 ' cells.txt
        expect_cells differs "0 2"
        expect_cells identical "0 0 0 1 0 3"
        expect_cells failed ""
        expect_cells timeout ""
    fi
    # only rank 0 writes: ranks 1-3 start in another folder (an MPMD launch
    # with a working directory per program) and must leave nothing there
    mkdir r0 rest
    expect_exit 0 mpirun --oversubscribe -np 1 --wdir "$PWD/r0" "$DETCHECK" canary --html p.html --junit p.xml : \
        -np 3 --wdir "$PWD/rest" "$DETCHECK" canary --html p.html --junit p.xml
    [ -s r0/p.html ] && [ -s r0/p.xml ] || fail "rank 0 wrote no reports"; ok
    [ -z "$(ls -A rest)" ] || { ls -la rest; fail "a rank other than 0 wrote a report"; }; ok
    # a rank that hangs: the page is out before the job is ended, naming it
    expect_exit 2 $MPI "$DETCHECK" canary --test-stall 3 --timeout 3 --html stall.html
    html_check stall.html
    expect_grep 'class="v">TROUBLE<' stall.html
    expect_grep '<title>rank 3: timed out: no report within 3 s' stall.html
else
    skip_part "no mpirun: the 4-rank page"
fi

# ---- 1,024 ranks: 128 hosts of 8 GPUs (host 1 with an odd name); rank 77
# differs (host 9, GPU 5), rank 300 timed out (host 37, GPU 4), rank 513
# failed (host 64, GPU 1)
"$SYNTH" --odd --html big.html --junit big.xml --markdown big.md 1024 128 77 300 513 || fail "the synthetic page"
ok
html_check big.html
expect_grep 'class="v">TROUBLE<' big.html
expect_grep '1024 ranks on 128 hosts: <b>1021 identical</b>, <b>1 differs</b>, <b>1 failed</b>, <b>1 timed out</b>' big.html
# every cell titled with its rank, host, device and bus id
n=$(grep -o '<title>rank [0-9]* on [^<]*, local [0-7], device cuda:[0-7] of 8, [^<]*, bus id pci 0000:[0-9a-f][0-9a-f]:00.0: identical</title>' big.html | wc -l)
[ "$n" -eq 1021 ] || fail "$n identical cells titled, not 1021"; ok
expect_grep '<title>rank 77 on gpu-node-009, local 5, device cuda:5 of 8, CUDA_VISIBLE_DEVICES=unset: NVIDIA H200, bus id pci 0000:68:00.0: differs at step 3: grad.blocks.1.mlp.fc.weight, 1 of 4096 elements differ, bits 0x00000080 (bit 7)</title>' big.html
expect_grep '<title>rank 513 on gpu-node-064, local 1, device cuda:1 of 8, [^<]*, bus id pci 0000:28:00.0: failed: cuda: an illegal memory access was encountered &lt;ECC?&gt;</title>' big.html
expect_grep '<title>rank 300: timed out: no report within 300 s (dead or hung); sent no host or device: placed on gpu-node-037, local 4, by its neighbouring ranks</title>' big.html
# the odd host: escaped everywhere, its label cut visibly
odd='r&lt;7&gt;&amp;&quot;q&quot;&#39;\\x01&#xe9;-very-long-host-name-0001.cluster.example'
expect_grep "<title>rank 8 on $odd, local 0" big.html
expect_grep '>r&lt;7&gt;&amp;&quot;q&quot;&#39;\\x01&#x2026;' big.html
expect_no_grep 'r<7>' big.html
# the tables: the three ranks that need attention, every rank in <details>
expect_grep '<h3>Ranks that are not identical (3)</h3>' big.html
expect_grep '<details><summary>All ranks (1024)</summary>' big.html
# the other reports: a case per rank
if command -v xmllint > /dev/null 2>&1; then
    xmllint --noout --schema "$DCK_TOP/tests/junit.xsd" big.xml 2> xmllint.err || { cat xmllint.err; fail "big.xml does not validate"; }
    ok
else
    skip_part "xmllint absent: the JUnit report of the synthetic run not validated"
fi
expect_grep 'tests="1024" failures="1" errors="2"' big.xml
expect_grep '<failure message="rank 77: gpu-node-009 cuda:5 (cuda:5 of 8, CUDA_VISIBLE_DEVICES=unset: NVIDIA H200, pci 0000:68:00.0) differs at step 3: grad.blocks.1.mlp.fc.weight' big.xml
expect_grep '<error message="rank 300: timed out: no report within 300 s (dead or hung)" type="timeout">' big.xml
expect_grep '^### :warning: detcheck canary: trouble' big.md
expect_grep '^1021 of 1024 devices identical$' big.md
if html_render big.html big.png 1400 1600; then
    cells big.png
    # 128 hosts of 8 in blocks of rows: every host has its row
    read -r _ rows blocks cols cw chh right bottom < cells.txt
    [ "$cols" -eq 8 ] && [ $((rows * blocks)) -ge 128 ] && [ $((rows * (blocks - 1))) -lt 128 ] ||
        fail "grid of $rows rows x $blocks blocks x $cols columns for 128 hosts of 8"
    ok
    # readable: cells of 10 px or more, within a 1,200 px window, not
    # taller than a screen or two
    [ "$cw" -ge 10 ] && [ "$chh" -ge 10 ] || fail "cells of $cw x $chh px: too small to read"; ok
    [ "$right" -lt 1200 ] && [ "$bottom" -lt 1400 ] || fail "the grid reaches ($right, $bottom)"; ok
    expect_cells differs "9 5"
    expect_cells timeout "37 4"
    expect_cells failed "64 1"
    [ "$(grep -c '^identical ' cells.txt)" -eq 1021 ] || fail "$(grep -c '^identical ' cells.txt) identical cells, not 1021"
    ok
    # ... each at its own place: ranks 0..1023 cover the 128 x 8 slots once
    [ "$(awk 'NR > 1 { print $2 * 8 + $3 }' cells.txt | sort -n | uniq | wc -l)" -eq 1024 ] ||
        fail "two cells at one place"
    ok
    [ "$(awk 'NR > 1 && ($2 > 127 || $3 > 7)' cells.txt | wc -l)" -eq 0 ] || fail "a cell outside the grid"; ok
fi

# ---- 1,024 hosts of one GPU: rank 77 differs (row 77); rank 300 timed out
# and its host sent nothing: it has no row of its own, and goes to "? no
# report", the last row
"$SYNTH" --odd --html one.html 1024 1024 77 300 513 || fail "the synthetic page of 1,024 hosts"
ok
html_check one.html
expect_grep '1024 ranks on 1023 hosts' one.html
expect_grep '>? no report<' one.html
if html_render one.html one.png 1400 2400; then
    cells one.png
    read -r _ rows blocks cols cw chh right bottom < cells.txt
    [ "$cols" -eq 1 ] && [ $((rows * blocks)) -ge 1024 ] || fail "grid of $rows x $blocks x $cols for 1,024 hosts"
    ok
    expect_cells differs "77 0"
    expect_cells failed "512 0"
    expect_cells timeout "1023 0"
    [ "$(grep -c '^identical ' cells.txt)" -eq 1021 ] || fail "not 1021 identical cells of 1,024 hosts"; ok
fi

# ---- uneven hosts: 1,000 ranks on 128 hosts (the first 104 of 8, then 7)
"$SYNTH" --html uneven.html 1000 128 77 300 513 || fail "the synthetic page of uneven hosts"
ok
html_check uneven.html
if html_render uneven.html uneven.png 1400 1600; then
    cells uneven.png
    expect_cells differs "9 5"
    # rank 900: past the 104 hosts of 8 (832 ranks), (900 - 832) = 9 x 7 + 5
    [ "$(grep -c '^identical ' cells.txt)" -eq 997 ] || fail "not 997 identical cells"; ok
    [ "$(awk '$1 == "identical" && $2 == 113 && $3 == 5' cells.txt | wc -l)" -eq 1 ] || fail "rank 900 not at host 113, GPU 5"
    ok
    [ "$(awk '$2 >= 104 && $3 == 7' cells.txt | wc -l)" -eq 0 ] || fail "a host of 7 ranks has an eighth cell"; ok
fi

# ---- the rule of every output
expect_exit 0 "$DETCHECK" canary --write-golden golden.json
cp golden.json keep.json
expect_exit 2 "$DETCHECK" canary --golden golden.json --html golden.json
expect_grep 'golden.json' err.txt
cmp -s golden.json keep.json || fail "--html replaced the golden file it reads"; ok
expect_exit 2 "$DETCHECK" canary --write-golden new-golden.json --html new-golden.json
expect_grep 'new-golden.json' err.txt
echo "my notes" > notes.html
expect_exit 2 "$DETCHECK" canary --html notes.html
expect_grep 'notes.html' err.txt
expect_grep 'HTML report' err.txt
[ "$(cat notes.html)" = "my notes" ] || fail "a file that is no detcheck page was replaced"; ok
expect_exit 2 "$DETCHECK" canary --json --html -
expect_grep 'standard output' err.txt
expect_exit 2 "$DETCHECK" canary --html page.html --junit page.html
expect_grep 'same file' err.txt
[ ! -e page.html ] || fail "a refused run wrote its page"; ok
expect_exit 2 "$DETCHECK" canary --html
expect_grep 'html needs' err.txt
# ... its own earlier page is replaced, and says the new verdict
expect_exit 0 "$DETCHECK" canary --html page.html
expect_grep 'class="v">OK<' page.html
expect_grep '<title>rank 0 on [^<]*: identical</title>' page.html
expect_exit 1 "$DETCHECK" canary --inject 0:2:model.wte.weight:1:1 --html page.html
expect_grep 'class="v">DIFFERENT<' page.html
expect_no_grep 'class="v">OK<' page.html
ls -a | grep -q '\.tmp' && { ls -a; fail "a temporary file was left behind"; }
ok
# a run in trouble before any rank ran still writes its page, saying why
expect_exit 2 "$DETCHECK" canary --golden missing.json --html trouble.html
expect_grep 'class="v">TROUBLE<' trouble.html
expect_grep 'missing.json: cannot open' trouble.html
# the help names the reports
expect_exit 0 "$DETCHECK" canary --help
expect_grep '^  --html FILE ' out.txt
done_ok

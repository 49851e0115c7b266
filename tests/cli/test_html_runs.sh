# --html on bisect, repro and resume-check (detcheck(1), HTML REPORTS): the page of two runs
# validates, names the first difference (step, tensor, op) on the picture,
# and the rendered picture shows it where it is: the leftmost "differs" cell
# of the step x module grid and the vertical line in the column of the
# first differing step, |A - B| drawn only from there on, both runs' curves
# drawn. Runs are faked as the Python recorder writes them (no PyTorch),
# or are tiny `detcheck train` runs.
. "$DCK_TOP/tests/cli/lib.sh"
. "$DCK_TOP/tests/cli/html_lib.sh"
command -v python3 > /dev/null 2>&1 || skip "python3 absent"
mkdir tmp
export TMPDIR="$PWD/tmp"

# The colours the page draws with (src/report/html.h, cli_marks).
EQUAL='#a6d5f0' DIFFERS='#d55e00' NONFINITE='#cc79a7'
FIRST='#0072b2' RUN_A='#332288' RUN_B='#ddaa33' DELTA='#882255'

# mkruns.py DIR [key=value...]: a recorded run (trajectory.jsonl,
# tensor_digests.bin, trace.bin), steps start..steps-1 (default 0..9), six
# modules with a weight and a bias each, recorded as gradient, parameter and
# optimizer state. part=S: run B of a pair that parts at step S: the
# parameter layers.1.attn.qkv.weight differs at S (its op
# aten.addmm.default computes other bits from equal inputs: the culprit),
# every tensor of layers.1 at S+1, every tensor from S+2 on; the loss and the
# gradient norm from S+1. nan=S: the loss is NaN from step S. trace=0: no
# trace.bin. prefix=P: module names start with P (escaping). recorded=N:
# tensor_digests.bin holds the first N steps only (0: its header alone).
# tpart=S: the trace parts at step S instead (default: part).
cat > mkruns.py <<'PY'
import math, os, struct, sys
d = sys.argv[1]
o = dict(a.split("=", 1) for a in sys.argv[2:])
os.makedirs(d, exist_ok=True)
steps, part = int(o.get("steps", 10)), int(o.get("part", -1))
start, nan, pre = int(o.get("start", 0)), int(o.get("nan", -1)), o.get("prefix", "")
mods = [pre + m for m in ("embed", "layers.0.attn.qkv", "layers.0.mlp.fc", "layers.1.attn.qkv", "layers.1.mlp.fc",
                          "head")]
names = [(k, m + "." + leaf + (".exp_avg" if k == 2 else "")) for k in (0, 1, 2) for m in mods
         for leaf in ("weight", "bias")]
def differs(s, k, n):
    if part < 0 or s < part:
        return False
    if s == part:
        return k == 1 and n == pre + "layers.1.attn.qkv.weight"
    return s > part + 1 or n.startswith(pre + "layers.1.")
f32 = lambda x: struct.unpack("<I", struct.pack("<f", x))[0]
with open(os.path.join(d, "trajectory.jsonl"), "w") as t:
    for s in range(start, steps):
        loss, gn = 4.0 * math.exp(-0.15 * s) + 0.5, 2.0 + math.sin(s)
        if part >= 0 and s > part:
            loss, gn = loss + 1e-6 * 10 ** (s - part), gn + 1e-5 * 10 ** (s - part)
        if s >= nan >= 0:
            loss = float("nan")
        t.write('{"step":%d,"loss":%s,"loss_bits":"%08x","grad_norm":%r,"grad_norm_bits":"%08x","lr":0.001}\n'
                % (s, "null" if loss != loss else repr(loss), f32(loss), gn, f32(gn)))
b = bytearray(b"DCKTDIG\0" + struct.pack("<II", 1, 0))
for i, (k, n) in enumerate(names):
    b += struct.pack("<BIBH", 1, i, k, len(n.encode())) + n.encode()
for s in range(start, min(steps, int(o.get("recorded", steps)))):
    b += struct.pack("<BqI", 2, s, len(names))
    for i, (k, n) in enumerate(names):
        b += struct.pack("<IQQ", i, 1000 * s + i, 8 if differs(s, k, n) else 7)
open(os.path.join(d, "tensor_digests.bin"), "wb").write(b)
if o.get("trace", "1") == "0":
    sys.exit(0)
ids, out = {}, bytearray(b"DCKTRAC\0" + struct.pack("<II", 1, 0))
def nid(n):
    global out
    if n is None:
        return 0xFFFFFFFF
    if n not in ids:
        ids[n] = len(ids)
        out += struct.pack("<BIH", 1, ids[n], len(n.encode())) + n.encode()
    return ids[n]
tpart = int(o.get("tpart", part))
for s in range(start, steps):
    ev = []
    for j, m in enumerate(mods):
        op = "aten.embedding.default" if j == 0 else "aten.addmm.default"
        bad, inb = tpart >= 0 and (s > tpart or (s == tpart and j >= 3)), tpart >= 0 and (s > tpart or (s == tpart and j > 3))
        x, y = 1000 * s + j + 9 * inb, 1000 * s + j + 1 + 9 * bad
        ev += [(m, op, x, y), (m, None, x, y)]
    for m, op, x, y in ev:
        nid(m), nid(op)
    out += struct.pack("<BqIB", 2, s, len(ev), 0)
    for m, op, x, y in ev:
        out += struct.pack("<BBIIIBB", 0, 0 if op is None else 1, nid(m), nid(op), 0, 1, 1)
        out += struct.pack("<BQQ", 1, 0, x) + struct.pack("<BQQ", 1, 0, y)
open(os.path.join(d, "trace.bin"), "wb").write(out)
PY
mkruns() { python3 mkruns.py "$@" || fail "mkruns $*"; }

# picture PNG NCOLS FIRSTCOL [nodelta]: what the rendered page shows. The grid's cells
# are the regions of the "identical" and "differs" fills at most 12 px high
# (the legend's swatches are 14 px); their bounding box and NCOLS give the
# columns. With FIRSTCOL >= 0: the leftmost "differs" cell is in column
# FIRSTCOL, the tallest run of first-difference pixels (the vertical line)
# is in it too, |A - B| is drawn (unless nodelta: the loss and gradient
# norm may still agree) and only from that column's left edge on, and at
# least as many cells differ in each of the three columns from FIRSTCOL as
# in the one before, more in the third (the difference spreads). With FIRSTCOL -1: no first-difference pixel, no
# "differs" cell, no |A - B|. Both runs' curves are drawn in every case.
picture() {
    png_boxes "$1" "$EQUAL" > eq.txt
    png_boxes "$1" "$DIFFERS" > df.txt
    "$HTML_PY" - "$1" "$2" "$3" "${4:-delta}" "$FIRST" "$DELTA" "$RUN_A" "$RUN_B" <<'PY' || fail "$1: the picture is not what the runs say"
import sys
from PIL import Image
png, ncols, first, want_delta = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "delta"
rgb = lambda s: tuple(int(s[i:i + 2], 16) for i in (1, 3, 5))
FIRST, DELTA, RUN_A, RUN_B = (rgb(c) for c in sys.argv[5:9])
def cells(path):
    out = []
    for line in open(path):
        x0, y0, x1, y1, n = map(int, line.split())
        if y1 - y0 + 1 <= 12:
            out.append((x0, y0, x1, y1))
    return out
eq, df = cells("eq.txt"), cells("df.txt")
allc = eq + df
assert allc, "no grid cell in the picture"
gx0, gx1 = min(c[0] for c in allc), max(c[2] for c in allc)
pitch = (gx1 - gx0 + 1) / ncols
col = lambda x: int((x - gx0) / pitch + 0.2)
img = Image.open(png).convert("RGB")
w, h = img.size
data = img.load()
xs = {}
count = {FIRST: 0, DELTA: 0, RUN_A: 0, RUN_B: 0}
delta_x = []
for y in range(h):
    for x in range(w):
        p = data[x, y]
        if p in count:
            count[p] += 1
            if p == FIRST:
                xs[x] = xs.get(x, 0) + 1
            elif p == DELTA:
                delta_x.append(x)
assert count[RUN_A] > 50 and count[RUN_B] > 50, ("both runs' curves", count[RUN_A], count[RUN_B])
if first < 0:
    assert not df, ("a differs cell in identical runs", df[:3])
    assert count[FIRST] == 0 and count[DELTA] == 0, ("a first difference or |A - B| in identical runs", count)
    sys.exit(0)
assert df, "no differs cell"
left = min(c[0] for c in df)
assert col(left) == first, ("the leftmost differs cell is in column %d, not %d" % (col(left), first), left, gx0, pitch)
line_x, line_n = max(xs.items(), key=lambda kv: kv[1])
assert line_n > 200, ("no vertical first-difference line", line_n)
assert col(line_x) == first, ("the line is in column %d, not %d" % (col(line_x), first), line_x)
assert delta_x or not want_delta, "no |A - B| drawn"
edge = gx0 + first * pitch
assert not delta_x or min(delta_x) >= edge - 1, ("|A - B| drawn left of the first differing column", min(delta_x), edge)
rows = [len({c[1] for c in df if col(c[0]) == k}) for k in range(first, first + 3)]
assert rows[0] <= rows[1] <= rows[2] and rows[0] < rows[2], ("the difference does not spread", rows)
PY
    ok
}

# ---------------------------------------------------------------- bisect: identical runs
mkruns a
mkruns a2
expect_exit 0 $DETCHECK bisect a a2 --html same.html
html_check same.html
expect_grep '>no difference: every step both runs hold agrees bit for bit</text>' same.html
expect_no_grep 'class="first"' same.html
expect_no_grep "fill=\"$DIFFERS\"" same.html
if html_render same.html same.png; then picture same.png 10 -1; fi

# ---------------------------------------------------------------- bisect: runs that part at step 3 and spread
mkruns b part=3
expect_exit 1 $DETCHECK bisect a b
cp out.txt plain.txt
expect_exit 1 $DETCHECK bisect a b --html diff.html
cmp out.txt plain.txt || fail "--html changed what bisect prints"; ok
html_check diff.html
# named on the picture (SVG text), and by the line's and the marker's titles
expect_grep '<text x="8" y="16" class="first">first difference: step 3, tensor layers.1.attn.qkv.weight (parameter), op aten.addmm.default in layers.1.attn.qkv (forward)</text>' diff.html
expect_grep '<text x="8" y="32">trajectory: step 4, loss_bits ' diff.html
expect_grep 'class="first" text-anchor="start">step 3</text>' diff.html
expect_grep '<title>first difference: layers.1.attn.qkv, step 3</title>' diff.html
# the cells: titled, the first differing one naming its tensor
expect_grep '<title>step 3, layers.1.attn.qkv: differs: parameter layers.1.attn.qkv.weight</title>' diff.html
expect_grep '<title>step 2, layers.1.attn.qkv: identical</title>' diff.html
# the tables: the steps around it, the tensors, the traced event
expect_grep '<h3>Steps around the first difference</h3>' diff.html
expect_grep '<tr class="first"><td class="n"><strong>3</strong></td>' diff.html
expect_grep '<h3>Recorded tensors that differ at step 3</h3>' diff.html
expect_grep '<tr><td>parameter</td><td class="name">layers.1.attn.qkv.weight</td><td>digest differs</td></tr>' diff.html
expect_grep 'its inputs are equal: this event is the culprit' diff.html
if html_render diff.html diff.png; then picture diff.png 10 3; fi
# detcheck-bisect(1), THE FIRST DIFFERENCE AND THE NEXT STEP:
# the trace parts a step after the tensors: its event is
# context, never the culprit, on the page as in the text
mkruns bl part=3 tpart=4
expect_exit 1 $DETCHECK bisect a bl --html late.html
expect_grep '^first trace difference, at step 4, comes after the first differing step 3 (context, not a culprit)' out.txt
html_check late.html
expect_grep 'output 0 differs; the runs already differ at step 3: context, not a culprit' late.html
expect_no_grep 'this event is the culprit' late.html
expect_grep 'class="first">first difference: step 3, tensor layers.1.attn.qkv.weight (parameter), op aten.addmm.default in layers.1.attn.qkv (forward) at step 4 (context, not a culprit)</text>' late.html
# the picture follows the step: the same runs parting at step 6
mkruns c part=6
expect_exit 1 $DETCHECK bisect a c --html c.html
html_check c.html
expect_grep 'class="first">first difference: step 6, tensor layers.1.attn.qkv.weight' c.html
if html_render c.html c.png; then picture c.png 10 6; fi

# ---------------------------------------------------------------- NaN, other step ranges, missing files, names
mkruns n nan=6 trace=0
expect_exit 1 $DETCHECK bisect a n --html nan.html
html_check nan.html
expect_grep 'class="first">first difference: step 6</text>' nan.html
expect_grep '<td class="n">NaN</td>' nan.html
expect_grep '<title>step 6, run B: loss NaN</title>' nan.html
expect_grep '<title>step 6, loss: NaN/Inf on one side: loss 2.1262786 vs NaN</title>' nan.html
expect_grep 'trace.bin in run A only: the traces are not compared' nan.html
if html_render nan.html nan.png; then
    [ "$(png_count nan.png "$NONFINITE")" -gt 100 ] || fail "nan.png: no NaN/Inf cell"
    ok
fi
# a run that starts later (as a resumed one): the steps before are not recorded in both
mkruns r start=4 trace=0
expect_exit 1 $DETCHECK bisect a r --html late.html
expect_grep '^not compared: trajectory steps 0..3 in run A only$' out.txt
html_check late.html
expect_grep '<title>step 2, loss: not recorded in both runs</title>' late.html
expect_grep 'B: run B (dashed, squares): r, steps 4..9' late.html
expect_grep '<td>-</td><td>-</td><td>recorded in A only</td></tr>' late.html
# only trajectories: the grid's rows are the trajectory's fields
mkdir t1 t2
cp a/trajectory.jsonl t1/ && cp b/trajectory.jsonl t2/
expect_exit 1 $DETCHECK bisect t1 t2 --html traj.html
html_check traj.html
expect_grep 'class="first">first difference: step 4</text>' traj.html
expect_grep '<title>step 4, loss: differs: loss 2.6952465 vs 2.6952565</title>' traj.html
expect_no_grep 'recorded tensors, by module' traj.html
# names with markup, quotes, a backslash, control and non-ASCII characters are escaped
P="<b>&\"x\"\\$(printf '\001')ü."
mkruns e1 "prefix=$P"
mkruns e2 "prefix=$P" part=2
expect_exit 1 $DETCHECK bisect e1 e2 --html names.html
html_check names.html
expect_grep 'class="first">first difference: step 2, tensor &lt;b&gt;&amp;&quot;x&quot;\\\\\\x01&#xfc;.layers.1.attn.qkv.weight (parameter)' names.html
expect_no_grep '<b>' names.html

# ---------------------------------------------------------------- what one run holds alone (detcheck-bisect(1), NOT COMPARED)
# bisect exits 1 for it (not compared: ...): the page names each item and
# never says "no difference" or OK; --allow-partial's acceptance is said so.
mkruns h0 trace=0
mkruns h1 trace=0 recorded=0
expect_exit 1 $DETCHECK bisect h0 h1 --html header.html
expect_grep '^not compared: recorded steps 0..9 in run A only (run B recorded none)$' out.txt
html_check header.html
expect_grep '<header class="fail"><h1><span class="v">DIFFERENT</span>' header.html
expect_no_grep 'no difference' header.html
expect_no_grep 'No difference' header.html
expect_grep '<h3 class="unpaired">Not compared (no agreement: the verdict counts them)</h3>' header.html
expect_grep '<li>not compared: recorded steps 0..9 in run A only (run B recorded none)</li>' header.html
expect_grep 'font-weight="bold">incomplete: not compared: what one run holds and the other lacks' header.html
if html_render header.html header.png; then picture header.png 10 -1; fi
mkruns h2 trace=0 recorded=6
expect_exit 1 $DETCHECK bisect h0 h2 --html part.html
expect_grep '<li>not compared: recorded steps 6..9 in run A only</li>' part.html
expect_no_grep 'no difference' part.html
expect_exit 0 $DETCHECK bisect h0 h2 --allow-partial --html accepted.html
expect_grep '<h3 class="unpaired">Not compared (accepted by --allow-partial)</h3>' accepted.html
expect_grep 'font-weight="bold">identical where both runs hold data (--allow-partial)' accepted.html
expect_no_grep 'no difference' accepted.html

# ---------------------------------------------------------------- bisect of `detcheck train` runs: checkpoints
CFG="--vocab 64 --width 32 --layers 2 --heads 2 --seq 16 --batch 1 --microbatches 2 --steps 8 --ckpt-every 1 -q"
expect_exit 0 $DETCHECK train $CFG --out ta
expect_exit 0 $DETCHECK train $CFG --out tb --flip-bit 4:model.blocks.1.attn.qkv.weight:123
expect_exit 1 $DETCHECK bisect ta tb --html train.html
html_check train.html
expect_grep 'class="first">first difference: step 4, tensor model.blocks.1.attn.qkv.weight (weights)</text>' train.html
expect_grep 'checkpoint tensors, by module' train.html
expect_grep '<h3>Checkpoint tensors that differ at step 4</h3>' train.html
expect_grep '<title>step 4, model.blocks.1.attn.qkv: differs: model.blocks.1.attn.qkv.weight, digest</title>' train.html
# steps 1..8: the first differing one is the fourth column
if html_render train.html train.png; then picture train.png 8 3 nodelta; fi

# ---------------------------------------------------------------- repro --html (test_repro.sh's command)
sed -n "/^cat > rec.py <<'PY'\$/,/^PY\$/p" "$DCK_TOP/tests/cli/test_repro.sh" | sed '1d;$d' > rec.py
[ -s rec.py ] || fail "rec.py not found in test_repro.sh"; ok
expect_exit 0 $DETCHECK repro --html repro0.html -- python3 rec.py
html_check repro0.html
expect_grep '<h2>run 1 and run 2, step by step</h2>' repro0.html
expect_grep '>no difference: every step both runs hold agrees bit for bit</text>' repro0.html
[ -z "$(ls tmp)" ] || fail "repro --html left $(ls tmp)"; ok
expect_exit 1 env VARY_ON=SEED $DETCHECK repro --env SEED=1,1,2 --html repro.html -- python3 rec.py
html_check repro.html
expect_grep '<h2>run 1 and run 3, step by step</h2>' repro.html
expect_grep 'class="first">first difference: step 2, tensor layers.0.weight (parameter)</text>' repro.html
# a run that recorded no tensor digest (its file a header): repro exits 1,
# and its page names what was not compared instead of "no difference"
expect_exit 1 env DIGESTS_RUN=2 DIGESTS=header $DETCHECK repro --html repro_h.html -- python3 rec.py
html_check repro_h.html
expect_no_grep 'no difference' repro_h.html
expect_grep '<li>not compared: recorded steps 0..4 in run A only (run B recorded none)</li>' repro_h.html
rm -rf tmp/*

# ---------------------------------------------------------------- resume-check -- CMD --html (test_resume_user.sh's command)
sed -n "/^cat > fake.py <<'PY'\$/,/^PY\$/p" "$DCK_TOP/tests/cli/test_resume_user.sh" | sed '1d;$d' > fake.py
[ -s fake.py ] || fail "fake.py not found in test_resume_user.sh"; ok
expect_exit 0 $DETCHECK resume-check --html ru0.html -- python3 fake.py
html_check ru0.html
expect_grep '<h2>the uninterrupted run and the run resumed from 5, step by step</h2>' ru0.html
expect_grep '>no difference: every step both runs hold agrees bit for bit</text>' ru0.html
expect_grep '<title>step 3, loss: not recorded in both runs</title>' ru0.html
[ -z "$(ls tmp)" ] || fail "resume-check --html left $(ls tmp)"; ok
expect_exit 1 $DETCHECK resume-check --html ru.html -- python3 fake.py forget_rng
html_check ru.html
expect_grep 'class="first">first difference: step 6, tensor rng.torch (state)</text>' ru.html
rm -rf tmp/*
# a step one run lacks (detcheck-resume-check(1), What is compared): the page names it and never says "no difference"
expect_exit 1 $DETCHECK resume-check --html rugap.html -- python3 fake.py gap_traj
html_check rugap.html
expect_no_grep 'no difference' rugap.html
expect_grep '<h3 class="unpaired">Not compared (no agreement: the verdict counts them)</h3>' rugap.html
expect_grep '<li>not compared: at 5 (clean stop): step 7 is missing from the resumed run&#39;s trajectory.jsonl' rugap.html
rm -rf tmp/*

# ---------------------------------------------------------------- resume-check --html (the built-in trainer)
RCFG="--vocab 64 --width 32 --layers 2 --heads 2 --seq 16 --batch 1 --microbatches 2"
expect_exit 0 $DETCHECK resume-check $RCFG --steps 4 --at 2 --html rc0.html -q
html_check rc0.html
expect_grep '<h2>uninterrupted run and resumed run (killed_after_2), step by step</h2>' rc0.html
expect_grep '>no difference: every step both runs hold agrees bit for bit</text>' rc0.html
expect_exit 1 $DETCHECK resume-check $RCFG --steps 4 --at 2 --resume-flip-bit 4:model.blocks.0.mlp.fc.weight:7 --html rc.html -q
html_check rc.html
expect_grep 'class="first">first difference: step 4, tensor model.blocks.0.mlp.fc.weight (weights)</text>' rc.html
rm -rf tmp/*
done_ok

# CLI: names that are not UTF-8, and names that would drive a
# terminal or a page (detcheck(1), NAMES IN OUTPUT: see the second half). A tensor name, a value name or
# a value text that is not valid UTF-8 used to make `hash` spin forever in
# libyaml's emitter, or with --json write an entry without its name (exit
# 0). The rule (detcheck-formats(7), "Names"): refused where the name enters
# the checkpoint, exit 2, the message naming the file and showing the name
# escaped. Deeply nested manifests stop at a fixed depth, at once. Every
# command runs under a timeout, so a hang fails the test instead of
# stalling it. Inputs are written by hand here (python3, no numpy/torch).
. "$DCK_TOP/tests/cli/lib.sh"
command -v python3 > /dev/null || skip "python3 absent"
command -v timeout > /dev/null || skip "timeout absent"

python3 - <<'EOF'
import json, struct, zipfile

def npy(shape=(2,)):
    h = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % (str(shape),)
    h = h + ' ' * (63 - (10 + len(h)) % 64) + '\n'
    return b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h.encode() + b'\0' * 8

# .npz whose member name holds the byte 0xff: written as 'abX.npy', the X
# patched (a zip's CRC covers the data, not the name)
with zipfile.ZipFile('bad.npz', 'w') as z:
    z.writestr('good.npy', npy())
    z.writestr('abX.npy', npy())
b = open('bad.npz', 'rb').read().replace(b'abX.npy', b'ab\xff.npy')
open('bad.npz', 'wb').write(b)

# safetensors: a key with a \u escape of a lone surrogate
def st(path, header_text):
    h = header_text.encode('latin-1') if isinstance(header_text, str) else header_text
    h += b' ' * (-len(h) % 8)
    open(path, 'wb').write(struct.pack('<Q', len(h)) + h + b'\0' * 8)
st('surrogate.safetensors', '{"a\\ud800":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}')
st('rawbyte.safetensors', b'{"a\xff":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}')

# .pt: a dict key (a tensor's name, a value's name) as BINUNICODE of raw
# bytes (the values of a pickle are numbers: their texts are ASCII)
def glob(mod, name): return b'c' + mod.encode() + b'\n' + name.encode() + b'\n'
def X(b): return b'X' + struct.pack('<I', len(b)) + b
def i(n): return b'J' + struct.pack('<i', n)
def tup(*items): return b'(' + b''.join(items) + b't'
def storage(key, numel):
    return tup(X(b'storage'), glob('torch', 'FloatStorage'), X(key.encode()), X(b'cpu'), i(numel)) + b'Q'
def tensor(key):
    return glob('torch._utils', '_rebuild_tensor_v2') + tup(storage(key, 2), i(0), tup(i(2)), tup(i(1)),
                                                            b'\x89', glob('collections', 'OrderedDict') + b')R') + b'R'
def save(path, items):
    with zipfile.ZipFile(path, 'w') as z:
        z.writestr('archive/data.pkl', b'\x80\x02}(' + b''.join(k + v for k, v in items) + b'u.')
        z.writestr('archive/byteorder', 'little')
        z.writestr('archive/data/0', b'\0' * 8)
        z.writestr('archive/version', '3\n')
save('key.pt', [(X(b'w\xff'), tensor('0'))])
save('valname.pt', [(X(b'w'), tensor('0')), (X(b'step\xc3'), i(1))])
save('good.pt', [(X(b'w\xc3\xa9'), tensor('0')), (X(b'\xe2\x82\xac'), i(1))])

# manifests nested deeper than any manifest: 100,000 levels (libyaml took
# minutes on this; it must stop at once), as sequences, maps and JSON
n = 100000
open('deep_seq.yaml', 'w').write('detcheck: 1\nx: ' + '[' * n + ']' * n + '\n')
open('deep_map.yaml', 'w').write('detcheck: 1\nx: ' + '{a: ' * n + '1' + '}' * n + '\n')
open('deep_block.yaml', 'w').write('detcheck: 1\nx:\n' + ''.join(' ' * (k + 1) + 'a:\n' for k in range(3000)))
open('deep.json', 'w').write('{"detcheck": 1, "x": ' + '[' * n + ']' * n + '}\n')
EOF

T="timeout 20"
# the rule, for every place a name comes from (the safetensors header
# parser refuses such a key itself, as a JSON error)
for f in bad.npz surrogate.safetensors rawbyte.safetensors key.pt valname.pt; do
    for json in "" --json; do
        expect_exit 2 $T "$DETCHECK" hash -q $json "$f" -o "out$json.m"
        expect_grep "$f" err.txt
        expect_grep "not valid UTF-8\|invalid UTF-8\|surrogate" err.txt
        [ ! -e "out$json.m" ] || fail "$f: a manifest was written"
    done
done
expect_exit 2 $T "$DETCHECK" hash -q bad.npz -o out.yaml
expect_grep "bad.npz: tensor name 'ab\\\\xff.*' is not valid UTF-8" err.txt
expect_exit 2 $T "$DETCHECK" hash -q key.pt -o out.yaml
expect_grep "tensor name 'w\\\\xff' is not valid UTF-8" err.txt
expect_exit 2 $T "$DETCHECK" hash -q valname.pt -o out.yaml
expect_grep "value name 'step\\\\xc3' is not valid UTF-8" err.txt
# to stdout too, and through verify and diff: the same refusal
expect_exit 2 $T "$DETCHECK" hash -q --json key.pt
expect_grep "not valid UTF-8" err.txt
expect_exit 2 $T "$DETCHECK" diff key.pt key.pt
expect_grep "not valid UTF-8" err.txt

# names that are UTF-8 (not ASCII) are written as before, in both formats
expect_exit 0 $T "$DETCHECK" hash -q good.pt -o good.yaml
expect_grep "name: wé" good.yaml
expect_grep '{name: €, value: "1"}' good.yaml
expect_exit 0 $T "$DETCHECK" verify good.pt --golden good.yaml
expect_exit 0 $T "$DETCHECK" hash -q --json good.pt -o good.json
expect_grep '"name": "wé"' good.json
expect_exit 0 $T "$DETCHECK" verify good.pt --golden good.json

# nesting: stopped at the limit, named, at once
for f in deep_seq.yaml deep_map.yaml deep_block.yaml deep.json; do
    expect_exit 2 timeout 10 "$DETCHECK" verify good.pt --golden "$f"
    expect_grep "$f: manifest nested deeper than 8 levels" err.txt
done

# ---------------------------------------------------------------- names are data (detcheck(1), NAMES IN OUTPUT)
# Tensor names with C1 controls (U+009B CSI, U+009D OSC), bidi overrides and
# isolates, a line separator, ESC, a literal "\x1b" (it must read apart from
# ESC), a 4,000-byte name (names past 4,096 bytes are refused) and two
# 3,000-byte names that differ only at their
# end; a file name with U+202E and a byte that is not UTF-8. Every output of
# verify, diff and bisect (text, --json, --markdown, --junit, --html) shows
# each name whole, quoted (cli.h: \\, \xNN, \u{HHHH}), with no raw dangerous
# code point; JSON gives the names back exactly.
. "$DCK_TOP/tests/cli/html_lib.sh"
cat > names.py <<'PY'
import json, os, re, struct, sys, html
NAMES = [b"csi.\xc2\x9b31m.w", b"osc.\xc2\x9d0;pwned\xc2\x9c.w", b"rlo.\xe2\x80\xaegpj.w",
         b"ls.\xe2\x80\xa8.w", b"ps.\xe2\x80\xa9.alm\xd8\x9c.w", b"esc.\x1b[31m.w", b"esc.\\x1b[31m.w",
         b"lrm.\xe2\x80\x8e.iso\xe2\x81\xa6.pdi\xe2\x81\xa9.w", b"zw\xe2\x80\x8b.bom\xef\xbb\xbf.w",
         b"long." + b"n" * 4000, b"x" * 3000 + b".A", b"x" * 3000 + b".B"]
QUOTED = [(0x80, 0x9f), (0x61c, 0x61c), (0x200b, 0x200f), (0x2028, 0x2029), (0x202a, 0x202e),
          (0x2060, 0x2064), (0x2066, 0x2069), (0xfdd0, 0xfdef), (0xfeff, 0xfeff)]
def dangerous(cp):
    return cp < 0x20 or cp == 0x7f or (cp & 0xfffe) == 0xfffe or any(a <= cp <= b for a, b in QUOTED)
def quote(b):  # cli.h's table, written again
    out = []
    for ch in b.decode("utf-8", "surrogateescape"):
        cp = ord(ch)
        if 0xdc80 <= cp <= 0xdcff: out.append("\\x%02x" % (cp - 0xdc00))
        elif ch == "\\": out.append("\\\\")
        elif cp < 0x20 or cp == 0x7f: out.append("\\x%02x" % cp)
        elif dangerous(cp): out.append("\\u{%04x}" % cp)
        else: out.append(ch)
    return "".join(out)
def md(s): return "".join("\\" + c if c in "\\`*_{}[]()<>#|~&!$^=" else c for c in s)
def page(s):
    s = html.escape(s, quote=True).replace("&#x27;", "&#39;")
    return "".join(c if ord(c) < 0x80 else "&#x%x;" % ord(c) for c in s)
def clean(path, lines_ok):
    """no raw dangerous code point, no byte that is not UTF-8"""
    t = open(path, "rb").read().decode("utf-8", "surrogateescape")
    for i, ch in enumerate(t):
        cp = ord(ch)
        if lines_ok and ch in "\n\t": continue
        if 0xdc80 <= cp <= 0xdcff or dangerous(cp):
            sys.exit("%s: raw U+%04X at %d: %r" % (path, cp, i, t[max(0, i - 30):i + 10]))
    return t
cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "make":
    for path, v in (("na.safetensors", 0.0), ("nb.safetensors", 1.0)):
        names = [n.decode() for n in NAMES]
        hdr = {n: {"dtype": "F32", "shape": [1], "data_offsets": [4 * k, 4 * k + 4]} for k, n in enumerate(names)}
        h = json.dumps(hdr).encode()
        h += b" " * (-len(h) % 8)
        open(path, "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<%df" % len(names), *[v] * len(names)))
    os.link("nb.safetensors", b"p\xe2\x80\xae\xff\xc2\x9b.safetensors")
    # a key that is not UTF-8, with a C1 control: refused, the message quoted
    h = b'{"bad\xff\xc2\x9b\xe2\x80\xae":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
    h += b" " * (-len(h) % 8)
    open("nbad.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 4)
    # recorded runs (as test_bisect.sh's mkrec): every tensor differs from
    # step 2 (nrb), or only the 4,005-byte one (nrl)
    for d, flip, only in (("nra", -1, None), ("nrb", 2, None), ("nrl", 2, 9)):
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "trajectory.jsonl"), "w") as t:
            for s in range(4):
                t.write('{"step":%d,"loss":1,"loss_bits":"3f800000","grad_norm":1,"grad_norm_bits":"3f800000","lr":0.1}\n' % s)
        b = bytearray(b"DCKTDIG\0" + struct.pack("<II", 1, 0))
        for i, n in enumerate(NAMES):
            b += struct.pack("<BIBH", 1, i, 1, len(n)) + n
        for s in range(4):
            b += struct.pack("<BqI", 2, s, len(NAMES))
            for i in range(len(NAMES)):
                b += struct.pack("<IQQ", i, 1000 * s + i, 8 if (s >= flip >= 0 and only in (None, i)) else 7)
        open(os.path.join(d, "tensor_digests.bin"), "wb").write(b)
elif cmd == "clean":  # FILE...: stderr, logs
    for f in args: clean(f, True)
elif cmd == "text":  # FILE [K...]: the names (all, or those of index K) whole and quoted
    t = clean(args[0], True)
    for k in (map(int, args[1:]) if args[1:] else range(len(NAMES))):
        q = quote(NAMES[k])
        if not re.search(r"(^|[ '(:])" + re.escape(q) + r"($|[ ':)\n,])", t, re.M):
            sys.exit("%s: %r not shown whole" % (args[0], q[:80]))
elif cmd == "path":  # FILE PATH: the path, quoted
    t = clean(args[0], True)
    q = quote(os.fsencode(args[1]))
    if q not in t and page(q) not in t: sys.exit("%s: path %r not shown" % (args[0], q))
elif cmd == "json":  # FILE: valid JSON, every name exactly, the path with \xNN text
    t = clean(args[0], True)
    strings = set()
    def walk(v):
        if isinstance(v, str): strings.add(v)
        elif isinstance(v, dict): [walk(k) or walk(x) for k, x in v.items()]
        elif isinstance(v, list): [walk(x) for x in v]
    walk(json.loads(t))
    for n in NAMES:
        if n.decode() not in strings: sys.exit("%s: name %r not in the JSON" % (args[0], n[:60]))
    if len(args) > 1 and args[1] not in strings: sys.exit("%s: %r not in the JSON" % (args[0], args[1]))
elif cmd == "md":
    t = clean(args[0], True)
    for n in NAMES:
        if md(quote(n)) not in t: sys.exit("%s: %r not shown whole" % (args[0], md(quote(n))[:80]))
elif cmd == "junit":
    import xml.etree.ElementTree as ET
    clean(args[0], True)
    cases = {c.get("name"): c for c in ET.parse(args[0]).getroot().iter("testcase")}
    for n in NAMES:
        c = cases.get(quote(n))
        if c is None: sys.exit("%s: testcase %r missing" % (args[0], quote(n)[:80]))
        f = c.find("failure")  # its message names it whole too
        if f is not None and not f.get("message").startswith(quote(n) + ": "):
            sys.exit("%s: message %r" % (args[0], f.get("message")[:80]))
elif cmd == "html":
    t = clean(args[0], True)
    for n in NAMES:
        if page(quote(n)) not in t: sys.exit("%s: %r not shown whole" % (args[0], page(quote(n))[:80]))
PY
names() { python3 names.py "$@" || fail "names.py $*"; ok; }
names make
odd=$(printf 'p\342\200\256\377\302\233.safetensors')
expect_exit 0 $T "$DETCHECK" hash -q na.safetensors -o na.yaml
# verify: text, JSON, Markdown, JUnit, HTML
expect_exit 1 $T "$DETCHECK" verify nb.safetensors --golden na.yaml --markdown v.md --junit v.xml --html v.html
names text out.txt
names clean err.txt
names md v.md
names junit v.xml
names html v.html
html_check v.html
expect_exit 1 $T "$DETCHECK" verify --json nb.safetensors --golden na.yaml
names json out.txt
oddg=$(printf 'g\342\200\256\377\302\233.yaml')
cp na.yaml "$oddg"
expect_exit 1 $T "$DETCHECK" verify nb.safetensors --golden "$oddg"
names path out.txt "$oddg"
# diff: the table (-v), JSON (the path's stray byte as the text \xff)
expect_exit 1 $T "$DETCHECK" diff -v na.safetensors "$odd" --markdown d.md --junit d.xml --html d.html
names text out.txt
names path out.txt "$odd"
names clean err.txt
names md d.md
names junit d.xml
names html d.html
names path d.html "$odd"
html_check d.html
expect_exit 1 $T "$DETCHECK" diff --json na.safetensors "$odd"
names json out.txt "$(printf 'p\342\200\256\\xff\302\233.safetensors')"
# a name that is not UTF-8 is refused; messages (the library's too) quote
# what they name
expect_exit 2 $T "$DETCHECK" diff nbad.safetensors na.safetensors
names clean err.txt
expect_grep 'nbad.safetensors: .*UTF-8' err.txt
expect_exit 2 $T "$DETCHECK" diff na.safetensors "$(printf 'gone\302\233\342\200\256\377')"
names clean err.txt
expect_grep 'gone\\u{009b}\\u{202e}\\xff' err.txt
# bisect over recorded tensors: every differing tensor is the first at step 2
# (the first by id: NAMES[0]); the long names through --json and the reports
expect_exit 1 $T "$DETCHECK" bisect nra nrb --markdown b.md --junit b.xml --html b.html
names text out.txt 0
names clean err.txt b.md b.xml
html_check b.html
names clean b.html
expect_exit 1 $T "$DETCHECK" bisect --json nra nrb
names clean out.txt
python3 -c "import json,sys; json.load(open('out.txt'))" || fail "bisect --json: not JSON"
expect_exit 1 $T "$DETCHECK" bisect nra nrl --junit bl.xml
names text out.txt 9
python3 - <<'PY' || fail "bisect: the long name cut"
import xml.etree.ElementTree as ET
names = {c.get("name") for c in ET.parse("bl.xml").getroot().iter("testcase")}
assert "long." + "n" * 4000 in names, sorted(len(n) for n in names)
PY
expect_exit 1 $T "$DETCHECK" bisect --json nra nrl
python3 -c "import json; d = json.load(open('out.txt')); assert ('long.' + 'n' * 4000) in json.dumps(d, ensure_ascii=False), d" || fail "bisect --json: the long name cut"
# the pages: a cell's title and the first difference's marker name the
# tensor whole (html_runs.c and html_diff.c cut them at 1 and 2 KiB)
N4="long.$(printf 'n%.0s' $(seq 4000))"
expect_exit 1 $T "$DETCHECK" bisect nra nrl --html bl.html
expect_grep "<title>step 2, long: differs: parameter $N4</title>" bl.html
python3 - <<'PY' || fail "long layer"
import json, struct
for path, v in (("la.safetensors", 0.0), ("lb.safetensors", 1.0)):
    h = json.dumps({"l" * 3000 + ".0.w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + struct.pack("<f", v))
PY
L3="$(printf 'l%.0s' $(seq 3000))"
expect_exit 1 $T "$DETCHECK" diff la.safetensors lb.safetensors --html ld.html
expect_grep "<title>first differing layer: $L3.0 (tensor $L3.0.w)</title>" ld.html

# traced runs (trace.bin) with a 4,000-byte module and 3,000-byte ops: the
# verdict line of the first differing op (an output differs: tb) and of an
# execution that parts (another op: tc) names them whole, on the terminal
# and in the reports (cli_trace.c kept them in 2 KiB buffers)
python3 - <<'PY' || fail "trace runs"
import os, struct
M, OA, OB = "mod." + "m" * 4000, "aten.a" + "o" * 3000, "aten.b" + "o" * 3000
for d, op, out in (("ta", OA, 7), ("tb", OA, 8), ("tc", OB, 7)):
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "trajectory.jsonl"), "w").write(
        '{"step":0,"loss":1,"loss_bits":"3f800000","grad_norm":1,"grad_norm_bits":"3f800000","lr":0.1}\n')
    b = bytearray(b"DCKTRAC\0" + struct.pack("<II", 1, 0))
    for i, n in enumerate((M, op)):
        b += struct.pack("<BIH", 1, i, len(n)) + n.encode()
    b += struct.pack("<BqIB", 2, 0, 1, 0)
    b += struct.pack("<BBIIIBB", 0, 1, 0, 1, 0, 1, 1) + struct.pack("<BQQ", 1, 0, 1) + struct.pack("<BQQ", 1, 0, out)
    open(os.path.join(d, "trace.bin"), "wb").write(b)
PY
M="mod.$(printf 'm%.0s' $(seq 4000))" OA="aten.a$(printf 'o%.0s' $(seq 3000))" OB="aten.b$(printf 'o%.0s' $(seq 3000))"
expect_exit 1 $T "$DETCHECK" bisect ta tb --junit tb.xml --markdown tb.md
expect_grep "^first differing op: step 0, forward, $M ($OA, call 0), output 0: inputs equal, output differs (culprit)\$" out.txt
expect_grep "first differing op: step 0, forward, $M ($OA, call 0), output 0: inputs equal" tb.xml
expect_grep "name=\"$M ($OA, call 0)\"" tb.xml
expect_exit 1 $T "$DETCHECK" bisect ta tc --junit tc.xml
expect_grep "^execution differs at event 0 of step 0: run A ran forward $M ($OA, call 0), run B ran forward $M ($OB, call 0)\$" out.txt
expect_grep "run B ran forward $M ($OB, call 0)" tc.xml

# repro: a state entry recorded in one run only and a differing tensor, both
# with 5,000-byte names, are named whole in its verdict and its report
# (cmd_repro.c cut the report's message at 4,096 bytes)
cat > longrec.py <<'PY'
import json, os, struct
d = os.environ["DETCHECK_RECORD"]
run = int(d.rsplit("_", 1)[1])
W, S = "w." + "w" * 5000, "start." + "s" * 5000
with open(os.path.join(d, "trajectory.jsonl"), "w") as t:
    for s in range(2):
        t.write('{"step":%d,"loss":1,"loss_bits":"3f800000","grad_norm":1,"grad_norm_bits":"3f800000","lr":0.1}\n' % s)
names = [(1, W)] + ([(3, S)] if run == 2 else [])
b = bytearray(b"DCKTDIG\0" + struct.pack("<II", 1, 0))
for i, (k, n) in enumerate(names):
    b += struct.pack("<BIBH", 1, i, k, len(n)) + n.encode()
for s in range(2):
    n = len(names) if s == 0 else 1  # the state the run started from: its first step only
    b += struct.pack("<BqI", 2, s, n)
    for i in range(n):
        b += struct.pack("<IQQ", i, s, 7 + (s == 1 and os.environ.get("FLIP") == str(run)))
open(os.path.join(d, "tensor_digests.bin"), "wb").write(b)
PY
W="w.$(printf 'w%.0s' $(seq 5000))" S="start.$(printf 's%.0s' $(seq 5000))"
expect_exit 1 timeout 60 "$DETCHECK" repro --workdir lr1 --junit lr1.xml -- python3 longrec.py
expect_grep "^state entries recorded in run 2 only: 1, the first $S at step 0\$" out.txt
expect_grep "state entries recorded in run 2 only: 1, the first $S at step 0" lr1.xml
expect_exit 1 timeout 60 env FLIP=2 "$DETCHECK" repro --workdir lr2 --junit lr2.xml -- python3 longrec.py
expect_grep "first differing tensor: step 1, parameter $W" out.txt
expect_grep "first differing tensor: step 1, parameter $W" lr2.xml
done_ok

# CLI: a file truncated while detcheck reads its maps (detcheck-hash(1), FILES AND FAULTS) is
# "FILE: changed while being read", exit 2, never a signal (SIGBUS killed
# the process where a read of a map ran outside the old guards: a segment
# stitched across a window edge, a reader's header or zip directory, a cut
# inside the last page read as zeros). The test hook truncates the file
# right after its Nth map (DCK_TEST_TRUNCATE_AT) to a chosen size
# (DCK_TEST_TRUNCATE_SIZE), so every path is hit for sure; a short timing
# sweep then cuts a file at varied moments of hash and verify.
. "$DCK_TOP/tests/cli/lib.sh"
T="timeout 60"

python3 - <<'EOF'
import json, struct, zipfile
def st(path, sizes, total=None, fill=b'', pad_header=0):
    hdr, off = {}, 0
    for i, n in enumerate(sizes):
        hdr["t%d" % i] = {"dtype": "F32", "shape": [n], "data_offsets": [off, off + 4 * n]}
        off += 4 * n
    if pad_header: hdr["__metadata__"] = {"pad": "x" * pad_header}
    h = json.dumps(hdr).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.write((fill * (4 * off // max(len(fill), 1) + 1))[:4 * off] if fill else b'')
        f.truncate(8 + len(h) + off)  # sparse: a 130 MiB file costs no disk
# two stream windows (128 MiB each); t1 crosses the edge off a segment's
st("big.safetensors", [20000001, 14000003])
# one window, real bytes; a header of 1.5 MiB is read in place (mapped)
st("mid.safetensors", [1000003, 999999], fill=bytes(range(251)))
st("hdr.safetensors", [1000], fill=bytes(range(7)), pad_header=1536 << 10)
# .npy: the header is parsed from the reader's map of the file
n = 1 << 20
h = b"{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % n
h += b" " * (63 - (10 + len(h)) % 64) + b"\n"
open("a.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h + bytes(range(256)) * (4 * n // 256))
# .pt (zip, written by hand): the zip directory and data.pkl are read from the map
def glob(mod, name): return b'c' + mod.encode() + b'\n' + name.encode() + b'\n'
def s(x): b = x.encode(); return b'X' + struct.pack('<I', len(b)) + b
def i(v): return b'J' + struct.pack('<i', v)
def tup(*items): return b'(' + b''.join(items) + b't'
def tensor(key, numel):
    stg = tup(s('storage'), glob('torch', 'FloatStorage'), s(key), s('cpu'), i(numel)) + b'Q'
    return glob('torch._utils', '_rebuild_tensor_v2') + tup(stg, i(0), tup(i(numel)), tup(i(1)), b'\x89',
                                                            glob('collections', 'OrderedDict') + b')R') + b'R'
with zipfile.ZipFile("a.pt", "w", zipfile.ZIP_STORED) as z:
    z.writestr('archive/data.pkl', b'\x80\x02}(' + s('w') + tensor('0', n) + s('b') + tensor('1', 3) + b'u.')
    z.writestr('archive/byteorder', 'little')
    z.writestr('archive/data/0', bytes(range(256)) * (4 * n // 256))
    z.writestr('archive/data/1', struct.pack('<3f', 1, 2, 3))
    z.writestr('archive/version', '3\n')
EOF
mkdir dir
cp mid.safetensors dir/m.safetensors
cp a.npy dir/z.npy
for f in big.safetensors mid.safetensors hdr.safetensors a.npy a.pt dir; do
    "$DETCHECK" hash -q -o "$f.yaml" "$f" || fail "hash $f"
done
cp -r dir dir.orig
for f in big.safetensors mid.safetensors hdr.safetensors a.npy a.pt; do cp "$f" "$f.orig"; done

# cut FILE [N] [SIZE] CMD...: FILE restored, then cut to SIZE bytes right
# after its Nth map while CMD runs; exit 2 naming FILE
cut() {
    victim=$1 n=$2 size=$3
    shift 3
    case $victim in dir/*) rm -rf dir && cp -r dir.orig dir ;; *) cp "$victim.orig" "$victim" ;; esac
    expect_exit 2 env DCK_TEST_TRUNCATE_MAPPED="$victim" DCK_TEST_TRUNCATE_AT="$n" \
        DCK_TEST_TRUNCATE_SIZE="$size" $T "$DETCHECK" "$@"
    expect_grep "$victim: changed while being read (now $size bytes" err.txt
}
big=$(stat -c %s big.safetensors.orig)
mid=$(stat -c %s mid.safetensors.orig)
# a segment cut by the first window's edge is copied on the calling thread
for cmd in "hash -q" "hash -q --no-files" "hash -q -t 1" "verify -q --golden big.safetensors.yaml"; do
    cut big.safetensors 1 104857600 $cmd big.safetensors
    cut big.safetensors 1 0 $cmd big.safetensors
    cut big.safetensors 2 $((big - 70000000)) $cmd big.safetensors
done
cut big.safetensors 1 104857600 diff -q big.safetensors.orig big.safetensors
# mid-window, mid-header, the last byte (inside its page: no fault, zeros)
for size in 0 100 4096 $((mid / 2)) $((mid - 1)); do
    cut mid.safetensors 1 $size hash -q mid.safetensors
    cut mid.safetensors 1 $size verify -q --golden mid.safetensors.yaml mid.safetensors
    cut mid.safetensors 1 $size diff -q mid.safetensors.orig mid.safetensors
done
# headers and zip directories parsed from the reader's map; a large
# safetensors header read in place
for f in a.npy a.pt hdr.safetensors; do
    for size in 0 200 $(($(stat -c %s $f.orig) / 2)); do
        cut $f 1 $size hash -q $f
        cut $f 1 $size diff -q $f.orig $f
    done
    cut $f 2 0 hash -q $f
done
cut a.pt 1 0 verify -q --golden a.pt.yaml a.pt
# a directory: one of its files
cut dir/z.npy 1 0 hash -q dir
cut dir/z.npy 1 4096 diff -q dir.orig dir
cut dir/m.safetensors 1 1000 hash -q dir
cut dir/m.safetensors 1 $((mid - 1)) verify -q --golden dir.yaml dir

# timing: cuts at varied moments; exit 2 naming the file, or 0 with the
# digests of the whole file (read before the cut), never a signal
python3 - "$DETCHECK" <<'EOF' || fail "timing sweep"
import os, shutil, subprocess, sys, time
D = sys.argv[1]
golden = open("big.safetensors.yaml").read()
def body(y): return [l for l in y.splitlines() if l.startswith("- {")]
t0 = time.monotonic()
subprocess.run([D, "hash", "-q", "big.safetensors.orig"], stdout=subprocess.DEVNULL, check=True)
run = time.monotonic() - t0
bad = []
for k in range(16):
    shutil.copyfile("big.safetensors.orig", "big.safetensors")
    cmd = [D, "hash", "-q", "big.safetensors"] if k % 2 else [D, "verify", "-q", "--golden", "big.safetensors.yaml", "big.safetensors"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(run * (k // 2) / 8)
    os.truncate("big.safetensors", [0, 67108864, 104857600, 134217000][k % 4])
    out, err = p.communicate()
    # (a cut before the file is opened is a file of that size: its own message)
    ok = p.returncode == 2 and b"big.safetensors: " in err
    if p.returncode == 0: ok = k % 2 == 0 or body(out.decode()) == body(golden)
    if not ok: bad.append((k, p.returncode, err.decode()[-200:]))
for b in bad: print("cut %d: exit %d %s" % b)
sys.exit(1 if bad else 0)
EOF
ok
done_ok

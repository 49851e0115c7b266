# CLI: input files that are not what they seem (FIFOs, devices, damaged
# shards in a directory, a file cut short while mapped, thousands of files
# under a low descriptor limit), -o over a checkpoint file, and the atomic
# manifest writer under faults (EIO injected, ENOSPC on a small tmpfs),
# with its mode and stale temporaries.
. "$DCK_TOP/tests/cli/lib.sh"

mk() { # mk FILE BYTE_SEED [ELEMENTS]
python3 - "$1" "$2" "${3:-60}" <<'PY'
import json, struct, sys
path, seed, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
import os
hdr = {os.path.basename(path).split(".")[0]: {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]}}
h = json.dumps(hdr).encode()
data = bytes(((i * 7 + seed) & 0xff) for i in range(256)) * (4 * n // 256) + bytes(4 * n % 256)
open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
PY
}
T="timeout 20"

# FIFOs and devices never block: exit 2 naming the file and its type
mk a.safetensors 1
mkfifo fifo.safetensors
expect_exit 2 $T "$DETCHECK" hash fifo.safetensors
expect_grep 'fifo.safetensors: not a regular file (a FIFO)' err.txt
expect_exit 2 $T "$DETCHECK" diff a.safetensors fifo.safetensors
expect_grep 'fifo.safetensors' err.txt
expect_exit 2 $T "$DETCHECK" hash /dev/zero
expect_grep 'a character device' err.txt
mkdir idx
mk idx/model-00001-of-00001.safetensors 2
mkfifo idx/model.safetensors.index.json
expect_exit 2 $T "$DETCHECK" hash idx
expect_grep 'model.safetensors.index.json: not a regular file (a FIFO)' err.txt
mkfifo golden.yaml
expect_exit 2 $T "$DETCHECK" verify --golden golden.yaml a.safetensors
expect_grep 'golden.yaml: not a regular file (a FIFO)' err.txt
rm fifo.safetensors golden.yaml

# a directory: a shard no reader takes is an error, other files a note
mkdir dir
mk dir/a.safetensors 1
mk dir/b.safetensors 2
echo "hello" > dir/README
expect_exit 0 "$DETCHECK" hash dir
expect_grep 'README: skipped (not a checkpoint file)' err.txt
expect_exit 0 "$DETCHECK" hash -q dir
expect_no_grep 'README' err.txt
cp -r dir dz
dd if=/dev/zero of=dz/b.safetensors bs=8 count=1 conv=notrunc 2>/dev/null
expect_exit 2 "$DETCHECK" hash dz
expect_grep 'dz/b.safetensors: looks like a checkpoint file' err.txt
cp -r dir dt
head -c 5 dir/b.safetensors > dt/b.safetensors
expect_exit 2 "$DETCHECK" hash dt
expect_grep 'dt/b.safetensors' err.txt

# -o over a checkpoint file: refused, nothing written
cp dir/b.safetensors keep.safetensors
expect_exit 2 "$DETCHECK" hash -o dir/b.safetensors dir
expect_grep 'dir/b.safetensors exists and is not a manifest' err.txt
cmp -s dir/b.safetensors keep.safetensors || fail "-o replaced a shard of its input"
ok
expect_exit 2 "$DETCHECK" hash -o /dev/null dir
expect_grep 'not a regular file' err.txt
# text that is not a manifest (a Megatron tree's latest_checkpointed_iteration.txt)
printf '100\n' > dir/latest_checkpointed_iteration.txt
expect_exit 2 "$DETCHECK" hash -o dir/latest_checkpointed_iteration.txt dir
expect_grep 'exists and is not a manifest' err.txt
[ "$(cat dir/latest_checkpointed_iteration.txt)" = 100 ] || fail "-o replaced a text file of its input"
rm dir/latest_checkpointed_iteration.txt
# a manifest is replaced by a manifest
"$DETCHECK" hash -q -o dir.yaml dir || fail "hash -o dir.yaml"
expect_exit 0 "$DETCHECK" hash -q -o dir.yaml dir

# SIGBUS: a file truncated while mapped (the test hook truncates it right
# after the map) is "changed while being read", exit 2, not a crash
for i in 1 2 3; do
    mk big.safetensors 3 8388608
    expect_exit 2 env DCK_TEST_TRUNCATE_MAPPED=big.safetensors "$DETCHECK" hash big.safetensors
    expect_grep 'big.safetensors: changed while being read (now 0 bytes' err.txt
done
mk big.safetensors 3 8388608
"$DETCHECK" hash -q -o big.yaml big.safetensors || fail "hash big"
expect_exit 2 env DCK_TEST_TRUNCATE_MAPPED=big.safetensors "$DETCHECK" verify --golden big.yaml big.safetensors
expect_grep 'changed while being read' err.txt
# diff reads contiguous tensors in place from its maps: a side truncated
# after it was mapped is the same error (either side), with its size now
for side in a b; do
    mk big.safetensors 3 8388608
    cp big.safetensors other.safetensors
    if [ $side = a ]; then x=big.safetensors y=other.safetensors; else x=other.safetensors y=big.safetensors; fi
    expect_exit 2 env DCK_TEST_TRUNCATE_MAPPED=big.safetensors "$DETCHECK" diff -q $x $y
    expect_grep 'big.safetensors: changed while being read (now 0 bytes' err.txt
done
# descriptors: 500 files under ulimit -n 64
mkdir many
python3 - <<'PY'
import json, struct
for i in range(500):
    h = json.dumps({"t%03d" % i: {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}}).encode()
    open("many/s%03d.safetensors" % i, "wb").write(struct.pack("<Q", len(h)) + h + bytes([i & 255] * 4))
PY
# (one created time for both: the two runs may straddle a second)
expect_exit 0 env SOURCE_DATE_EPOCH=1700000000 sh -c "ulimit -n 64 && exec \"$DETCHECK\" hash -q -o many.yaml many"
SOURCE_DATE_EPOCH=1700000000 "$DETCHECK" hash -q -o many2.yaml many
cmp -s many.yaml many2.yaml || fail "ulimit -n 64 changed the manifest"
ok

# the manifest writer: umask, an existing file's mode, stale temporaries
(umask 077 && "$DETCHECK" hash -q -o m.yaml a.safetensors) || fail "hash -o"
[ "$(stat -c %a m.yaml)" = 600 ] || fail "umask 077 gave $(stat -c %a m.yaml)"
ok
chmod 640 m.yaml
(umask 022 && "$DETCHECK" hash -q -o m.yaml a.safetensors) || fail "hash -o"
[ "$(stat -c %a m.yaml)" = 640 ] || fail "existing mode 640 became $(stat -c %a m.yaml)"
ok
echo junk > m.yaml.tmp.AbC123
touch -d '2 hours ago' m.yaml.tmp.AbC123
echo junk > m.yaml.tmp.XyZ789 # fresh: perhaps a live writer's
ln -s /etc/passwd m.yaml.tmp.Lnk000
touch -h -d '2 hours ago' m.yaml.tmp.Lnk000 2>/dev/null || true
"$DETCHECK" hash -q -o m.yaml a.safetensors || fail "hash -o"
[ ! -e m.yaml.tmp.AbC123 ] || fail "stale temporary left"
[ -e m.yaml.tmp.XyZ789 ] && [ -L m.yaml.tmp.Lnk000 ] || fail "removed a fresh temporary or a link"
ok

# EIO on the Nth write, fsync or rename: exit 2, the old manifest intact
cp m.yaml m.good
mk c.safetensors 9
for n in 1 2 3; do
    expect_exit 2 env DCK_TEST_FAIL_WRITE=$n "$DETCHECK" hash -q -o m.yaml c.safetensors
    expect_grep 'm.yaml: .*Input/output error' err.txt
    cmp -s m.yaml m.good || fail "fault $n damaged the manifest"
    ok
done
ls m.yaml.tmp.* 2>/dev/null | grep -v 'XyZ789\|Lnk000' && fail "a temporary was left" || ok

# ENOSPC: a small tmpfs, when mount is permitted
mkdir small
if mount -t tmpfs -o size=16k tmpfs small 2>/dev/null; then
    trap 'umount small 2>/dev/null' EXIT
    "$DETCHECK" hash -q -o small/m.yaml a.safetensors || fail "hash -o small"
    cp small/m.yaml m.small
    head -c 12000 /dev/zero > small/fill
    expect_exit 2 "$DETCHECK" hash -q -o small/m.yaml many
    expect_grep 'small/m.yaml: .*No space left on device' err.txt
    cmp -s small/m.yaml m.small || fail "ENOSPC damaged the manifest"
    ok
    umount small; trap - EXIT
else
    skip_part "mount -t tmpfs not permitted: no ENOSPC test"
fi
# kill -9 at random points of hash -o: the target is always a whole
# manifest, the old one or the new one, never a mix or a stub
python3 - <<'PY'
import json, struct
n = 60000
hdr, off = {}, 0
for i in range(n):
    hdr["model.layers.%d.w%d" % (i // 8, i % 8)] = {"dtype": "F32", "shape": [4], "data_offsets": [off, off + 16]}
    off += 16
h = json.dumps(hdr).encode()
open("k.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes(range(256)) * (off // 256) + bytes(off % 256))
PY
export SOURCE_DATE_EPOCH=1700000000
"$DETCHECK" hash -q -o k.old a.safetensors || fail "hash a"
"$DETCHECK" hash -q -o k.new k.safetensors || fail "hash k"
t0=$(date +%s%N)
"$DETCHECK" hash -q -o k.tmp k.safetensors || fail "hash k"
span=$((($(date +%s%N) - t0) / 1000000 + 1)) # ms
seed=${DCK_FAULT_SEED:-$$}
echo "kill -9 trials: seed $seed (DCK_FAULT_SEED), run ${span} ms"
i=0
while [ $i -lt 8 ]; do
    cp k.old k.yaml
    ms=$(awk -v s="$seed" -v i="$i" -v m="$span" 'BEGIN { srand(s + i); printf "%d", rand() * m * 1.2 }')
    "$DETCHECK" hash -q -o k.yaml k.safetensors &
    pid=$!
    sleep "$(awk -v ms="$ms" 'BEGIN { printf "%.3f", ms / 1000 }')"
    kill -9 $pid 2> /dev/null || true
    wait $pid 2> /dev/null || true
    if cmp -s k.yaml k.old; then :; elif cmp -s k.yaml k.new; then :; else
        fail "kill -9 after ${ms} ms left k.yaml neither the old nor the new manifest"
    fi
    ok
    i=$((i + 1))
done
"$DETCHECK" verify -q --golden k.yaml k.safetensors > /dev/null 2>&1 || cmp -s k.yaml k.old || fail "k.yaml unusable"
unset SOURCE_DATE_EPOCH
done_ok

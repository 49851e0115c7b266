# CLI: zstd inputs as the format defines them: several frames (cat a.zst
# b.zst), skippable frames (pzstd), frames without a content size, bytes
# after the last frame (an error naming the file), the decoded-size
# limit on every zstd input, and decoded bytes judged as the plain file's
# (trailing data in a frame that declares no size included; detcheck-formats(7), LIMITS).
. "$DCK_TOP/tests/cli/lib.sh"
command -v zstd >/dev/null || skip "zstd(1) not installed"

python3 - <<'PY'
import json, struct
n = 300000
h = json.dumps({"w": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}).encode()
open("a.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + bytes((i * 13) & 255 for i in range(n)))
PY
"$DETCHECK" hash -q --no-files -o golden.yaml a.safetensors || fail "hash"

# two frames: the decoded size is the sum
head -c 1000 a.safetensors > p1
tail -c +1001 a.safetensors > p2
zstd -q -f p1 -o p1.zst && zstd -q -f p2 -o p2.zst
cat p1.zst p2.zst > multi.safetensors.zst
expect_exit 0 "$DETCHECK" verify --golden golden.yaml multi.safetensors.zst

# a frame without a content size (from a pipe), then a sized one
cat p1 | zstd -q -c > p1s.zst
cat p1s.zst p2.zst > mixed.safetensors.zst
expect_exit 0 "$DETCHECK" verify --golden golden.yaml mixed.safetensors.zst

# skippable frames: pzstd's, and one by hand between two frames
if command -v pzstd >/dev/null; then
    pzstd -q -f -p 2 a.safetensors -o pz.safetensors.zst
    expect_exit 0 "$DETCHECK" verify --golden golden.yaml pz.safetensors.zst
else
    skip_part "pzstd not installed"
fi
printf '\120\052\115\030\003\000\000\000abc' > skip.bin
cat skip.bin p1.zst skip.bin p2.zst > skip.safetensors.zst
expect_exit 0 "$DETCHECK" verify --golden golden.yaml skip.safetensors.zst

# bytes after the last frame: an error naming the file
zstd -q -f a.safetensors -o a.safetensors.zst
cat a.safetensors.zst > junk.safetensors.zst
printf 'garbage!' >> junk.safetensors.zst
expect_exit 2 "$DETCHECK" hash junk.safetensors.zst
expect_grep 'junk.safetensors.zst: 8 bytes after the last zstd frame' err.txt
cat a.safetensors.zst p1.zst > extra.safetensors.zst # a whole extra frame: more data
expect_exit 2 "$DETCHECK" hash extra.safetensors.zst
expect_grep 'extra.safetensors.zst' err.txt
head -c $(( $(wc -c < a.safetensors.zst) - 3 )) a.safetensors.zst > cut.safetensors.zst
expect_exit 2 "$DETCHECK" hash cut.safetensors.zst
expect_grep 'cut.safetensors.zst: truncated zstd frame' err.txt

# the decoded-size limit holds for every zstd input, not only .pt
expect_exit 2 env DETCHECK_MAX_DECODED=100K "$DETCHECK" hash a.safetensors.zst
expect_grep 'a.safetensors.zst: decompresses to more than 102400 bytes' err.txt
expect_exit 2 env DETCHECK_MAX_DECODED=100K "$DETCHECK" hash mixed.safetensors.zst
expect_grep 'mixed.safetensors.zst: decompresses to more than 102400 bytes' err.txt
expect_exit 0 env DETCHECK_MAX_DECODED=1M "$DETCHECK" verify --golden golden.yaml mixed.safetensors.zst
# a skippable frame first (pzstd), then frames without sizes: still zstd
zstd -q -c < a.safetensors > a-pipe.zst
cat skip.bin a-pipe.zst > skipunsized.safetensors.zst
expect_exit 0 "$DETCHECK" verify --golden golden.yaml skipunsized.safetensors.zst
expect_exit 2 env DETCHECK_MAX_DECODED=100K "$DETCHECK" hash skipunsized.safetensors.zst
expect_grep 'skipunsized.safetensors.zst: decompresses to more than 102400 bytes' err.txt

# The decoded stream is judged as the plain file: a format that refuses
# trailing bytes in a plain file refuses them after decompression, whether
# the frames declare their sizes (zstd FILE) or not (zstd from a pipe, where
# the size is known only by decoding). Each format with the check:
python3 - <<'PY'
import struct
n = 1000
h = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % n
h += " " * ((64 - (10 + len(h) + 1) % 64) % 64) + "\n"
data = b"".join(struct.pack("<f", i * 0.5) for i in range(n))
open("b.npy", "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + data)
PY
printf 'junkjunk' > junk
zstd -q -f junk -o junk.zst        # a frame with its size
zstd -q -c < junk > junkp.zst      # a frame without
for fmt in safetensors npy; do
    src=a.$fmt; [ $fmt = npy ] && src=b.npy
    "$DETCHECK" hash -q -o g-$fmt.yaml $src || fail "hash $src"
    cat $src junk > plain-$fmt
    expect_exit 2 "$DETCHECK" hash -q plain-$fmt
    trail=$(sed -n 's/.*plain-'$fmt': //p' err.txt)
    case "$trail" in *trailing*) ok ;; *) fail "plain $fmt: no trailing-bytes error: $trail" ;; esac
    zstd -q -f $src -o s-$fmt.zst
    zstd -q -c < $src > p-$fmt.zst
    # the valid file compressed from a pipe still verifies (.npy: the
    # tensor's name is the file's, so the same name in a folder)
    mkdir -p ok-$fmt && cp p-$fmt.zst ok-$fmt/$src.zst
    expect_exit 0 "$DETCHECK" verify --golden g-$fmt.yaml ok-$fmt/$src.zst
    for combo in "s-$fmt.zst junk.zst" "s-$fmt.zst junkp.zst" "p-$fmt.zst junkp.zst"; do
        cat $combo > t.$fmt.zst
        cat plain-$fmt | zstd -q -c > whole.$fmt.zst # one pipe frame, junk inside
        for z in t.$fmt.zst whole.$fmt.zst; do
            for cmd in "hash" "hash --no-files" "verify --golden g-$fmt.yaml" "verify --files --golden g-$fmt.yaml"; do
                expect_exit 2 "$DETCHECK" $cmd $z
                expect_grep "$z: $trail" err.txt
            done
        done
    done
done

# 200 MB of zeros appended as a frame without a size (about 6 KB on disk):
# not hashed silently as part of the file; under a lower decoded-size limit,
# stopped by it (the frame is decoded only up to the limit)
head -c 200000000 /dev/zero | zstd -q -c > zeros.zst
cat a.safetensors.zst zeros.zst > zeros.safetensors.zst
for cmd in "hash" "hash --no-files" "verify --golden golden.yaml"; do
    expect_exit 2 "$DETCHECK" $cmd zeros.safetensors.zst
    expect_grep 'zeros.safetensors.zst: 200000000 trailing data bytes belong to no tensor' err.txt
done
expect_exit 2 env DETCHECK_MAX_DECODED=1M "$DETCHECK" verify --golden golden.yaml zeros.safetensors.zst
expect_grep 'zeros.safetensors.zst: decompresses to more than 1048576 bytes' err.txt
done_ok

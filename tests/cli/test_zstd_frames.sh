# CLI: zstd inputs as the format defines them: several frames (cat a.zst
# b.zst), skippable frames (pzstd), frames without a content size, bytes
# after the last frame (an error naming the file), and the decoded-size
# limit on every zstd input.
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
done_ok

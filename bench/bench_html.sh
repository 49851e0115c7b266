#!/bin/sh
# --html pages (detcheck(1), HTML REPORTS): a diff of 10,000 tensors (1,000 layers of
# 10, a few differing), its page
#   html-size:   the page's size (goal < 5 MB)
#   html-render: headless Chromium loading and rendering the page to a PNG,
#                vs the same Chromium rendering a blank page (the peer: what
#                start-up alone costs), alternated (wall time: Chromium's
#                work is in its own processes, which CPU time of the parent
#                does not see; goal: the page under 2 s, start-up included)
#   html-write:  detcheck diff with --html vs without (CPU time: the cost
#                of drawing and writing the page; goal <= 2x)
# Chromium and tidy come from Debian (ci/deps.sh); absent: the rows skip.
. "$(dirname "$0")/lib.sh"
bench_init html
L=$(bench_size 1000 100)
python3 - "$work" "$L" <<'PY' || exit 2
import json, struct, sys
work, layers = sys.argv[1], int(sys.argv[2])
names = ["q.weight", "k.weight", "v.weight", "o.weight", "fc1.weight", "fc1.bias", "fc2.weight",
         "fc2.bias", "ln1.weight", "ln2.weight"]
for side in "ab":
    hdr, data = {}, bytearray()
    for l in range(layers):
        for k, n in enumerate(names):
            v = [1.0 + 0.001 * i for i in range(16)]
            # layers past the middle differ in one tensor, by more and more
            if side == "b" and l >= layers // 2 and k == l % 10:
                v[3] += 1e-6 * (l - layers // 2 + 1)
            b = struct.pack("<16f", *v)
            hdr["model.layers.%d.%s" % (l, n)] = {"dtype": "F32", "shape": [16],
                                                  "data_offsets": [len(data), len(data) + len(b)]}
            data += b
    h = json.dumps(hdr).encode()
    open("%s/%s.safetensors" % (work, side), "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))
PY
a=$work/a.safetensors b=$work/b.safetensors page=$work/page.html
N=$((L * 10))
"$D" diff -q --html "$page" "$a" "$b" > /dev/null 2>&1
[ $? -eq 1 ] || { echo "html: detcheck diff --html failed"; exit 2; }
echo "a diff of $N tensors ($L layers), $(($L / 2 * 1)) differing; page $(wc -c < "$page") bytes"

# ---- html-size
bytes=$(wc -c < "$page")
mb=$(awk -v b="$bytes" 'BEGIN { printf "%.2f", b / 1e6 }')
v=$(bench_verdict "$mb" 5)
[ "$v" = met ] && [ "$mb" = "5.00" ] && v="NOT met"
bench_header html-size "page of a diff of $N tensors"
printf "   %s MB   goal < 5 MB   %s\n" "$mb" "$v"
bench_note_status "$v"
bench_summary html-size "page of a diff of $N tensors" "$mb MB" "" "$mb MB" "< 5 MB" "$v"

# ---- html-render
chrome=
for c in chromium chromium-browser google-chrome; do command -v "$c" > /dev/null 2>&1 && { chrome=$c; break; }; done
t="Chromium renders the page of $N tensors"
if [ -z "$chrome" ]; then
    bench_skip html-render "$t" "Chromium is not installed (ci/deps.sh installs Debian's chromium)"
else
    printf '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>blank</title></head><body></body></html>\n' > "$work/blank.html"
    flags="--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --force-device-scale-factor=1 --window-size=1200,1600"
    A_LABEL="chromium: the page" A_CMD="$chrome $flags --user-data-dir=\"$work/pa\" --screenshot=\"$work/pa.png\" \"file://$page\""
    B_LABEL="chromium: a blank page" B_CMD="$chrome $flags --user-data-dir=\"$work/pb\" --screenshot=\"$work/pb.png\" \"file://$work/blank.html\""
    bench_header html-render "$t"
    if bench_pair html-render 5; then
        bench_table html-render
        bench_stats html-render A
        aw=$S_WALL
        bench_stats html-render B
        bw=$S_WALL
        v=$(bench_verdict "$aw" 2)
        [ "$v" = met ] && awk -v a="$aw" 'BEGIN { exit !(a >= 2) }' && v="NOT met"
        printf "   the page: %.2f s wall (a blank page: %.2f s; the page's own share %.2f s, ratio %.2fx)   goal < 2 s   %s\n" \
            "$aw" "$bw" "$(awk -v a="$aw" -v b="$bw" 'BEGIN { print a - b }')" \
            "$(awk -v a="$aw" -v b="$bw" 'BEGIN { print (b > 0) ? a / b : 0 }')" "$v"
        bench_note_status "$v"
        bench_summary html-render "$t" "$(printf '%.2f s wall' "$aw")" "$(printf '%.2f s (blank)' "$bw")" \
            "$(printf '%.2f s wall' "$aw")" "< 2 s" "$v"
    else
        bench_row_fail html-render "$t"
    fi
fi

# ---- html-write
t="detcheck diff of $N tensors with --html vs without"
A_LABEL="detcheck diff --html" A_CMD="\"$D\" diff -q --html \"$work/w.html\" \"$a\" \"$b\"" A_RC=1
B_LABEL="detcheck diff" B_CMD="\"$D\" diff -q \"$a\" \"$b\"" B_RC=1
bench_header html-write "$t"
if bench_pair html-write 7; then
    bench_ratio html-write "$t" cpu 2.0
else
    bench_row_fail html-write "$t"
fi
bench_finish

# CLI: detcheck seal and verify --seal (detcheck-seal(1)). Sealed copies of
# every directory reader's fixtures (DCP, Megatron-LM, Megatron-Core,
# DeepSpeed), a .pt and a safetensors file, and a DCP checkpoint that 4 ranks
# of real torch.distributed (gloo) write, verify with exit 0; one byte of a
# tensor flipped in one .distcp is exit 1 naming the tensor and that file; a
# truncated or missing file, a seal of another step, no seal, a file that is
# no seal, a linked or FIFO seal are exit 2 naming them, without a hang; seal
# replaces only an earlier seal. The torch part skips without torch.
. "$DCK_TOP/tests/cli/lib.sh"

FXD="$DCK_TOP/tests/fixtures"
PY=${DCK_TORCH_PYTHON:-python3}

# every reader: sealed, then verified against its seal (the seal is not
# read as a checkpoint file: hash gives the same manifest with it inside)
i=0
for f in dcp1 dcp2 dcp_raw megatron megatron_dist/iter_0000005 megatron_tp2pp2 mcore/fsms_tp2dp2/iter_0000005 \
         mcore/fsms_tp2dp2 mcore/ds_zero2_dp2/global_step3 mcore/ds_zero2_dp2 mcore/legacy_tp2 \
         layouts/trainer/checkpoint-1 training.pt whole_model.safetensors; do
    i=$((i+1))
    mkdir c$i
    ck=c$i/${f##*/} # the name, which may say the step
    cp -r "$FXD/$f" "$ck"
    "$DETCHECK" hash -q "$ck" | grep -v '^created:' > before.yaml
    expect_exit 0 "$DETCHECK" seal "$ck"
    [ -d "$ck" ] && seal="$ck/detcheck-seal.yaml" || seal="$ck.detcheck-seal.yaml"
    expect_grep "^sealed $ck: [0-9]* tensors, root [0-9a-f]\{32\} -> $seal\$" out.txt
    expect_grep '^seal_from: files$' "$seal"
    expect_grep '^seal: "1"$' "$seal"
    "$DETCHECK" hash -q "$ck" | grep -v '^created:' > after.yaml
    cmp -s before.yaml after.yaml || { diff before.yaml after.yaml; fail "$f: the seal changed hash's manifest"; }
    ok
    expect_exit 0 "$DETCHECK" verify --seal "$ck"
    expect_grep "^OK: [0-9]* tensors identical to $seal " out.txt
done
expect_grep '^seal_step: "5"$' c5/iter_0000005/detcheck-seal.yaml
expect_grep '^seal_step: "3"$' c9/global_step3/detcheck-seal.yaml
expect_grep '^seal_step: "1"$' c12/checkpoint-1/detcheck-seal.yaml
expect_grep '^seal_checkpoint: training.pt$' c13/training.pt.detcheck-seal.yaml
expect_no_grep '^seal_step:' c13/training.pt.detcheck-seal.yaml
expect_no_grep '^seal_step:' c1/dcp1/detcheck-seal.yaml

# a byte of the .pt's tensor data: exit 1 naming the file (the only holder)
python3 - c13/training.pt <<'PY'
import sys, zipfile
p = sys.argv[1]
z = zipfile.ZipFile(p)
info = next(i for i in z.infolist() if "/data/" in i.filename and i.file_size >= 8)
b = bytearray(open(p, "rb").read())
h = info.header_offset # the local header's own name and extra lengths
start = h + 30 + int.from_bytes(b[h + 26:h + 28], "little") + int.from_bytes(b[h + 28:h + 30], "little")
b[start + 3] ^= 0x40
open(p, "wb").write(bytes(b))
PY
expect_exit 1 "$DETCHECK" verify --seal c13/training.pt
expect_grep '^DIFFERENT: ' out.txt
expect_grep "^  differs  .*: digest [0-9a-f]*, seal [0-9a-f]*  (in training.pt)\$" out.txt
expect_grep '^  file     training.pt: ' out.txt

# damage to a copy of dcp2 (two .distcp files)
damaged() { rm -rf "$1"; cp -r "$FXD/dcp2" "$1"; "$DETCHECK" seal -q "$1"; }
damaged step_11
expect_exit 0 "$DETCHECK" verify --seal step_11
head -c 3000 step_11/__1_0.distcp > t && cat t > step_11/__1_0.distcp
expect_exit 2 "$DETCHECK" verify --seal step_11
expect_grep '__1_0.distcp' err.txt
damaged step_11
rm step_11/__0_0.distcp
expect_exit 2 "$DETCHECK" verify --seal step_11
expect_grep '__0_0.distcp' err.txt
# a file of another checkpoint (dcp1's only file) copied in
damaged step_11
cp "$FXD/dcp1/__0_0.distcp" step_11/__0_0.distcp
set +e; "$DETCHECK" verify --seal step_11 > out.txt 2> err.txt; rc=$?; set -e
[ "$rc" = 1 ] || [ "$rc" = 2 ] || fail "a file of another checkpoint: exit $rc"
ok
grep -q '__0_0.distcp' out.txt err.txt || fail "the file from another checkpoint is not named"
ok
# a seal of another step
damaged step_11
rm -rf step_12
cp -r "$FXD/dcp2" step_12
cp step_11/detcheck-seal.yaml step_12/
expect_exit 2 "$DETCHECK" verify --seal step_12
expect_grep "step_12/detcheck-seal.yaml: seal of step 11, checkpoint's name says step 12" err.txt
# unsealed, and no checkpoint
rm step_12/detcheck-seal.yaml
expect_exit 2 "$DETCHECK" verify --seal step_12
expect_grep "step_12 is not sealed (no step_12/detcheck-seal.yaml)" err.txt
expect_exit 2 "$DETCHECK" verify --seal gone
expect_grep 'gone: no such checkpoint' err.txt
# what is no seal at the seal's path
"$DETCHECK" hash -q -o step_12/detcheck-seal.yaml step_12
expect_exit 2 "$DETCHECK" verify --seal step_12
expect_grep "step_12/detcheck-seal.yaml: not a detcheck seal (a manifest without seal: 1)" err.txt
for text in 'garbage: [' ''; do
    printf '%s' "$text" > step_12/detcheck-seal.yaml
    expect_exit 2 "$DETCHECK" verify --seal step_12
    expect_grep 'step_12/detcheck-seal.yaml' err.txt
done
# seal refuses to write over it, and leaves it as it was
"$DETCHECK" hash -q -o plain.yaml step_12
for f in plain.yaml "$FXD/dcp1/__0_0.distcp"; do
    cp "$f" step_12/detcheck-seal.yaml
    expect_exit 2 "$DETCHECK" seal step_12
    expect_grep 'step_12/detcheck-seal.yaml exists and is not a detcheck seal; refusing to overwrite it' err.txt
    cmp -s "$f" step_12/detcheck-seal.yaml || fail "seal changed a file that is no seal"
    ok
done
# a linked and a FIFO seal: refused by both, never read (no hang)
cp step_11/detcheck-seal.yaml elsewhere.yaml
ln -sf "$PWD/elsewhere.yaml" step_12/detcheck-seal.yaml
expect_exit 2 timeout 20 "$DETCHECK" verify --seal step_12
expect_grep 'step_12/detcheck-seal.yaml is a symbolic link' err.txt
expect_exit 2 timeout 20 "$DETCHECK" seal step_12
expect_grep 'step_12/detcheck-seal.yaml is a symbolic link' err.txt
cmp -s step_11/detcheck-seal.yaml elsewhere.yaml || fail "seal wrote through a link"
ok
rm step_12/detcheck-seal.yaml
mkfifo step_12/detcheck-seal.yaml
expect_exit 2 timeout 20 "$DETCHECK" verify --seal step_12
expect_grep 'step_12/detcheck-seal.yaml is a FIFO' err.txt
expect_exit 2 timeout 20 "$DETCHECK" seal step_12
expect_grep 'step_12/detcheck-seal.yaml is a FIFO' err.txt
rm step_12/detcheck-seal.yaml
# an earlier seal is replaced; --step must agree with the name
expect_exit 0 "$DETCHECK" seal step_12
expect_exit 0 "$DETCHECK" seal --step 12 step_12
expect_exit 2 "$DETCHECK" seal --step 11 step_12
expect_grep "step 12" err.txt
expect_grep '^seal_step: "12"$' step_12/detcheck-seal.yaml
cp -r "$FXD/dcp1" unnamed
expect_exit 0 "$DETCHECK" seal --step 40 unnamed
expect_grep '^seal_step: "40"$' unnamed/detcheck-seal.yaml
# usage
expect_exit 2 "$DETCHECK" verify --seal --golden plain.yaml step_12
expect_grep 'give one' err.txt
expect_exit 2 "$DETCHECK" verify --seal step_12 step_11
expect_exit 2 "$DETCHECK" verify --seal --exclude 'x*' step_12

# reports: --json names the seal and the files per difference; JUnit and
# Markdown state the verdict
damaged step_11
printf '\377' | dd of=step_11/__1_0.distcp bs=1 seek=200 conv=notrunc 2> /dev/null
expect_exit 1 "$DETCHECK" verify --seal --json step_11 --junit r.xml --markdown r.md --html r.html
python3 - <<'PY' || fail "--json of verify --seal"
import json
d = json.load(open("out.txt"))
assert d["equal"] is False and d["seal"].endswith("step_11/detcheck-seal.yaml"), d
assert all("files" in e for e in d["differences"]), d
assert any(e["files"] == "__1_0.distcp" for e in d["differences"]), d
PY
ok
grep -q 'failures="[1-9]' r.xml || fail "JUnit report of exit 1 without failures"
ok
expect_grep ':x:' r.md
[ -s r.html ] || fail "no --html page"
ok

# real DCP: 4 gloo ranks save DTensors of prime sizes (and a replicated one)
# (spawn starts the ranks from a file: not from stdin)
cat > write_dcp4.py <<'PY'
import os, sys
try:
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import distribute_tensor, Shard, Replicate
    from torch.distributed.device_mesh import init_device_mesh
except Exception:
    sys.exit(77)

def run(rank, path, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=4)
    mesh = init_device_mesh("cpu", (4,))
    g = torch.Generator().manual_seed(5)
    state = {"model.w": distribute_tensor(torch.randn(37, 11, generator=g), mesh, [Shard(0)]),
             "model.b": distribute_tensor(torch.randn(101, generator=g).bfloat16(), mesh, [Shard(0)]),
             "model.r": distribute_tensor(torch.randn(13, 3, generator=g), mesh, [Replicate()]),
             "step": 7}
    dcp.save(state, checkpoint_id=path)
    dist.destroy_process_group()

if __name__ == "__main__":
    import socket
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    mp.spawn(run, args=(sys.argv[1], port), nprocs=4)
PY
set +e
"$PY" write_dcp4.py dcp4
rc=$?
set -e
if [ "$rc" = 77 ]; then
    skip_part "$PY cannot import torch.distributed (DTensor, DCP): no 4-rank DCP checkpoint written"
else
    [ "$rc" = 0 ] || fail "writing the 4-rank DCP checkpoint: exit $rc"
    ls dcp4/__3_0.distcp > /dev/null || fail "no rank 3 file"
    ok
    expect_exit 0 "$DETCHECK" seal dcp4
    expect_exit 0 "$DETCHECK" verify --seal dcp4
    # one byte of model.w's chunk in rank 2's file (found by its bytes)
    "$PY" - dcp4 <<'PY' || fail "flipping a byte of rank 2's chunk"
import io, sys, torch, torch.distributed.checkpoint as dcp
p = sys.argv[1]
md = dcp.FileSystemReader(p).read_metadata()
for idx, info in md.storage_data.items():
    if idx.fqn == "model.w" and info.relative_path == "__2_0.distcp":
        raw = bytearray(open(f"{p}/{info.relative_path}", "rb").read())
        chunk = bytes(raw[info.offset:info.offset + info.length])
        try:
            data = torch.load(io.BytesIO(chunk), weights_only=True).numpy().tobytes()
            at = info.offset + chunk.index(data)
        except Exception: # a raw chunk: the bytes themselves
            at = info.offset
        raw[at + 5] ^= 0x01
        open(f"{p}/{info.relative_path}", "wb").write(bytes(raw))
        break
else:
    sys.exit("no chunk of model.w in __2_0.distcp")
PY
    ok
    expect_exit 1 "$DETCHECK" verify --seal dcp4
    expect_grep '^  differs  model.w: digest [0-9a-f]*, seal [0-9a-f]*  (in __0_0.distcp, __1_0.distcp, __2_0.distcp, __3_0.distcp)$' out.txt
    expect_grep '^  file     __2_0.distcp: ' out.txt
    expect_no_grep 'model.b\|model.r' out.txt
fi
done_ok

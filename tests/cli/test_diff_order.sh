# CLI: what "first" means in detcheck diff (detcheck-diff(1), Summary). Where a checkpoint
# keeps its tensors' order (a torch.save'd state_dict: the pickle's order;
# DCP: its metadata's; an index whose weight_map is not in byte order: as
# written), the first differing tensor and layer go by it, and the output
# says so ("Order: model ...", JSON summary.order); else by name ("Order:
# name", a single safetensors file: the safetensors library writes its header
# sorted by dtype and name). When both sides keep one and they disagree, A's
# is used and said. A model without numbered layers gets a row per module.
# Files: safetensors and indexes written by Python's struct (every build);
# state_dicts written by torch.save and torch.distributed.checkpoint, and a
# file by the safetensors library, with DCK_TORCH_PYTHON (skipped without).
. "$DCK_TOP/tests/cli/lib.sh"

jget() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); s=d['summary']; print($2)" "$1"; }
expect_eq() { [ "$1" = "$2" ] || fail "got '$1', wanted '$2' ($3)"; ok; }

# ---- an index (struct): shards hold "zproj", "attn", "head" (a model without
# numbered layers); the weight_map lists them in the model's order, or sorted
# as transformers writes it (json.dumps(sort_keys=True))
python3 - <<'PY'
import json, os, struct
def shard(path, tensors):
    hdr, data = {}, b""
    for name, vals in tensors:
        b = struct.pack("<%df" % len(vals), *vals)
        hdr[name] = {"dtype": "F32", "shape": [len(vals)], "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(hdr).encode()
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)
ORDER = ["zproj.weight", "zproj.bias", "attn.weight", "attn.bias", "head.weight", "head.bias"]
for side in "ab":
    for kind in ("model", "sorted"):
        d = "%s_%s" % (kind, side)
        os.makedirs(d)
        v = {n: [1.0, 2.0, 3.0] for n in ORDER}
        if side == "b":
            v["zproj.bias"] = [1.0, 2.5, 3.0]   # first in the model's order
            v["head.weight"] = [1.0, 2.0, 3.5]  # first by name
        shard(d + "/model-00001-of-00002.safetensors", [(n, v[n]) for n in ORDER[:3]])
        shard(d + "/model-00002-of-00002.safetensors", [(n, v[n]) for n in ORDER[3:]])
        wm = {n: "model-0000%d-of-00002.safetensors" % (1 if i < 3 else 2) for i, n in enumerate(ORDER)}
        doc = {"metadata": {"total_size": 72}, "weight_map": wm}
        text = json.dumps(doc, indent=2, sort_keys=(kind == "sorted"))
        open(d + "/model.safetensors.index.json", "w").write(text)
# B lists the same tensors in another order
os.makedirs("other_b")
for f in os.listdir("model_b"):
    if f.endswith(".safetensors"):
        open("other_b/" + f, "wb").write(open("model_b/" + f, "rb").read())
wm = json.load(open("model_b/model.safetensors.index.json"))["weight_map"]
wm = {n: wm[n] for n in ["attn.weight", "attn.bias", "zproj.weight", "zproj.bias", "head.weight", "head.bias"]}
open("other_b/model.safetensors.index.json", "w").write(json.dumps({"weight_map": wm}))
# B has a tensor A lacks, between attn and head in B's order
os.makedirs("extra_b")
v = {n: [1.0, 2.0, 3.0] for n in ORDER + ["mid.w"]}
shard("extra_b/model-00001-of-00001.safetensors", [(n, v[n]) for n in sorted(v)])
wm = {n: "model-00001-of-00001.safetensors" for n in ORDER[:4] + ["mid.w"] + ORDER[4:]}
open("extra_b/model.safetensors.index.json", "w").write(json.dumps({"weight_map": wm}))
PY

# model order (the index as written): zproj first, a row per module
expect_exit 1 "$DETCHECK" diff model_a model_b
expect_grep "^First differing tensor: zproj.bias$" out.txt
expect_grep "^Order: model (A's own order of its tensors)$" out.txt
expect_grep "^Modules: 2 of 3 differ; first differing module: zproj (zproj.bias)$" out.txt
expect_grep "^  zproj   *1/2 tensors differ" out.txt
expect_exit 1 "$DETCHECK" diff --json model_a model_b
expect_eq "$(jget out.txt "s['order'], s['order_from'], s['orders_disagree'], s['layers_are'], s['first_differing_tensor'], s['first_differing_layer'], [l['layer'] for l in d['layers']], [t['name'] for t in d['tensors']][:2]")" \
    "model a False modules zproj.bias zproj ['zproj', 'attn', 'head'] ['zproj.weight', 'zproj.bias']" index-model
# the page: a row per module in the model's order, no "(no layer)" row
expect_exit 1 "$DETCHECK" diff --html p.html model_a model_b
rows=$(grep -o '<text x="18" y="[0-9.]*"[^>]*>[^<]*</text>' p.html | sed 's/.*>\([^<]*\)<\/text>/\1/' | tr '\n' ' ')
[ "$rows" = "zproj attn head " ] || fail "page rows: $rows"
ok
expect_grep '<h2>Difference by module</h2>' p.html
expect_grep '<strong>first differing module: zproj</strong> (tensor zproj.bias)' p.html
expect_grep 'One row per module, a name up to its last dot (no name numbers a layer)' p.html
expect_grep 'in model order, A.s own order of its tensors\.' p.html
expect_no_grep '(no layer)' p.html

# a weight_map in byte order (transformers' sort_keys) says nothing: names
expect_exit 1 "$DETCHECK" diff --json sorted_a sorted_b
expect_eq "$(jget out.txt "s['order'], s['order_from'], s['first_differing_tensor'], [l['layer'] for l in d['layers']]")" \
    "name None head.weight ['attn', 'head', 'zproj']" index-sorted
expect_exit 1 "$DETCHECK" diff sorted_a sorted_b
expect_grep "^Order: name (neither side keeps the order of its tensors" out.txt
expect_exit 1 "$DETCHECK" diff --html s.html sorted_a sorted_b
expect_grep 'in name order: neither checkpoint keeps the order of its tensors\.' s.html
# A keeps none: B's; both keep one and disagree: A's, said
expect_exit 1 "$DETCHECK" diff --json sorted_a model_b
expect_eq "$(jget out.txt "s['order'], s['order_from'], s['first_differing_tensor']")" "model b zproj.bias" index-b
expect_exit 1 "$DETCHECK" diff --json model_a other_b
expect_eq "$(jget out.txt "s['order'], s['order_from'], s['orders_disagree'], s['first_differing_tensor']")" "model a True zproj.bias" disagree
expect_exit 1 "$DETCHECK" diff model_a other_b
expect_grep "^Order: model (A's own order of its tensors; B lists the tensors both hold in another order)$" out.txt
expect_exit 1 "$DETCHECK" diff --json other_b model_a
expect_eq "$(jget out.txt "s['orders_disagree'], s['first_differing_tensor'], [l['layer'] for l in d['layers']]")" "True zproj.bias ['attn', 'zproj', 'head']" disagree-b

# a tensor on one side only: after the tensor before it on its side
expect_exit 1 "$DETCHECK" diff --json model_a extra_b
expect_eq "$(jget out.txt "s['order_from'], s['orders_disagree'], s['first_differing_tensor'], [t['name'] for t in d['tensors']]")" \
    "a False mid.w ['zproj.weight', 'zproj.bias', 'attn.weight', 'attn.bias', 'mid.w', 'head.weight', 'head.bias']" one-side

# ---- torch: files the real libraries write
PY=${DCK_TORCH_PYTHON:-python3}
if ! "$PY" -c "import torch, safetensors" 2>/dev/null; then
    skip_part "$PY cannot import torch and safetensors: no state_dict written by torch.save"
    done_ok
fi
"$PY" - <<'EOF'
import torch, torch.nn as nn
from collections import OrderedDict
from safetensors.torch import save_file
class Net(nn.Module):  # numbered layers whose model order is not their names'
    def __init__(self):
        super().__init__()
        self.enc = nn.ModuleList(nn.Linear(3, 3) for _ in range(3))
        self.dec = nn.ModuleList(nn.Linear(3, 3) for _ in range(2))
        self.out = nn.Linear(3, 2)
class Flat(nn.Module):  # no numbered layers
    def __init__(self):
        super().__init__()
        self.zproj, self.attn, self.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)
torch.manual_seed(0)
for cls, tag in ((Net, "net"), (Flat, "flat")):
    m = cls()
    sd = {k: v.detach().clone() for k, v in m.state_dict().items()}
    torch.save(sd, "%s_a.pt" % tag)
    save_file(sd, "%s_a.safetensors" % tag)
    b = {k: v.clone() for k, v in sd.items()}
    if tag == "net":
        b["enc.2.weight"][0, 0] += 1e-3   # model order: enc.2 before dec.1
        b["dec.1.bias"][1] += 1e-3        # name order: dec.1 first
    else:
        b["zproj.bias"][0] += 1e-3
        b["head.weight"][1, 1] += 1e-3
    torch.save(b, "%s_b.pt" % tag)
    save_file(b, "%s_b.safetensors" % tag)
    torch.save(OrderedDict(reversed(list(b.items()))), "%s_rev.pt" % tag)
    try:
        import torch.distributed.checkpoint as dcp
        dcp.save(sd, checkpoint_id="%s_dcp_a" % tag)
        dcp.save(b, checkpoint_id="%s_dcp_b" % tag)
    except Exception as e:
        print("no DCP:", e)
EOF
[ -f net_a.pt ] || fail "torch did not write the state_dicts"
expect_exit 1 "$DETCHECK" diff net_a.pt net_b.pt
expect_grep "^Layers: 2 of 5 differ; first differing layer: enc.2 (enc.2.weight)$" out.txt
expect_grep "^First differing tensor: enc.2.weight$" out.txt
expect_grep "^Order: model (A's own order of its tensors)$" out.txt
expect_exit 1 "$DETCHECK" diff --json net_a.pt net_b.pt
expect_eq "$(jget out.txt "s['order'], s['order_from'], [l['layer'] for l in d['layers']]")" \
    "model a ['enc.0', 'enc.1', 'enc.2', 'dec.0', 'dec.1']" torch-net
# the safetensors library's file keeps no model order: names
expect_exit 1 "$DETCHECK" diff --json net_a.safetensors net_b.safetensors
expect_eq "$(jget out.txt "s['order'], s['first_differing_tensor'], s['first_differing_layer']")" "name dec.1.bias dec.1" torch-st
expect_exit 1 "$DETCHECK" diff --json net_a.safetensors net_b.pt
expect_eq "$(jget out.txt "s['order'], s['order_from'], s['first_differing_tensor']")" "model b enc.2.weight" torch-st-pt
# B saved in reverse: A's order, said
expect_exit 1 "$DETCHECK" diff --json net_a.pt net_rev.pt
expect_eq "$(jget out.txt "s['order_from'], s['orders_disagree'], s['first_differing_tensor']")" "a True enc.2.weight" torch-rev
# a model without numbered layers: a row per module, in the model's order
expect_exit 1 "$DETCHECK" diff flat_a.pt flat_b.pt
expect_grep "^Modules: 2 of 3 differ; first differing module: zproj (zproj.bias)$" out.txt
expect_exit 1 "$DETCHECK" diff --html f.html flat_a.pt flat_b.pt
rows=$(grep -o '<text x="18" y="[0-9.]*"[^>]*>[^<]*</text>' f.html | sed 's/.*>\([^<]*\)<\/text>/\1/' | tr '\n' ' ')
[ "$rows" = "zproj attn head " ] || fail "torch page rows: $rows"
ok
if [ -d net_dcp_a ]; then
    expect_exit 1 "$DETCHECK" diff --json net_dcp_a net_dcp_b
    expect_eq "$(jget out.txt "s['order'], s['first_differing_tensor'], s['first_differing_layer']")" "model enc.2.weight enc.2" dcp
else
    skip_part "torch.distributed.checkpoint did not save here: DCP's order not checked"
fi
done_ok

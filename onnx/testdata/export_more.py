# Runs on the GPU machine (torch, onnx, onnxruntime): exports more architectures with ONNX
# Runtime's outputs (export_record.py beside it), and checks kiln's own ONNX exports against ONNX
# Runtime.
import os, sys, json, tarfile, numpy as np, torch, onnx, onnxruntime as ort
from torch import nn
from export_record import export
torch.manual_seed(0); np.random.seed(0)
out = sys.argv[1]; tmp = "/tmp/more"; os.makedirs(tmp, exist_ok=True)
report = {"versions": {"torch": torch.__version__, "onnx": onnx.__version__, "ort": ort.__version__}}

class ResBlock(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        s.c1 = nn.Conv2d(16, 16, 3, padding=1, bias=False); s.b1 = nn.BatchNorm2d(16)
        s.c2 = nn.Conv2d(16, 16, 3, padding=1, bias=False); s.b2 = nn.BatchNorm2d(16)
        s.head = nn.Linear(16, 10)
    def forward(s, x):
        x = s.stem(x); y = torch.relu(s.b1(s.c1(x))); y = s.b2(s.c2(y))
        x = torch.relu(x + y)
        return s.head(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

class MobileBlock(nn.Module):  # inverted residual with squeeze-excite and hardswish
    def __init__(s):
        super().__init__()
        s.expand = nn.Conv2d(8, 32, 1); s.dw = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        s.se1 = nn.Conv2d(32, 8, 1); s.se2 = nn.Conv2d(8, 32, 1); s.project = nn.Conv2d(32, 8, 1)
        s.bn = nn.BatchNorm2d(8)
    def forward(s, x):
        y = nn.functional.hardswish(s.expand(x)); y = nn.functional.hardswish(s.dw(y))
        w = nn.functional.hardsigmoid(s.se2(torch.relu(s.se1(nn.functional.adaptive_avg_pool2d(y, 1)))))
        return s.bn(x + s.project(y * w))

class Encoder(nn.Module):  # transformer encoder layer with a key padding mask from lengths
    def __init__(s):
        super().__init__(); s.layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True, activation="gelu")
    def forward(s, x, lengths):
        mask = torch.arange(x.shape[1]).unsqueeze(0) >= lengths.unsqueeze(1)
        return s.layer(x, src_key_padding_mask=mask)

class Embed(nn.Module):  # token ids (int64) → embedding bag → classifier with mixed activations
    def __init__(s):
        super().__init__(); s.emb = nn.Embedding(50, 16); s.l1 = nn.Linear(16, 32); s.l2 = nn.Linear(16, 32); s.out = nn.Linear(64, 5)
    def forward(s, ids):
        e = s.emb(ids).mean(1)
        a, b = torch.chunk(torch.cat([torch.tanh(s.l1(e)), nn.functional.leaky_relu(s.l2(e), 0.1)], 1), 2, 1)
        h = torch.cat([torch.clamp(a, -0.5, 0.5), nn.functional.gelu(b, approximate="tanh")], 1)
        return torch.log_softmax(s.out(h), -1)

models = {
    "resnet_block": (ResBlock().eval(), (torch.randn(2, 3, 32, 32),), ["x"], None),
    "mobile_block": (MobileBlock().eval(), (torch.randn(2, 8, 12, 12),), ["x"], None),
    "encoder_mask": (Encoder().eval(), (torch.randn(2, 10, 64), torch.tensor([10, 6])), ["x", "lengths"], None),
    "embedding_mlp": (Embed().eval(), (torch.randint(0, 50, (4, 7)),), ["ids"], {"ids": {0: "batch"}}),
}
for name, (m, args, names, dyn) in models.items():
    entry = export(tmp, name, m, args, names, dyn)
    if entry: report[name] = entry

# kiln's exports, checked by ONNX Runtime.
meta = json.load(open(".device_in/meta.json")); worst = {}
np_dtype = {"f32": np.float32, "i32": np.int32, "i64": np.int64, "bool": np.bool_, "u8": np.uint8}
for name, m in meta.items():
    try:
        onnx.checker.check_model(onnx.load(f".device_in/{name}.onnx"))
        sess = ort.InferenceSession(f".device_in/{name}.onnx", providers=["CPUExecutionProvider"])
        feeds = {k: np.fromfile(f".device_in/{name}.in.{k}.bin", dtype=np_dtype[d]).reshape(s) for k, (s, d) in m["inputs"].items()}
        got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        diff = 0.0
        for k, (s, d) in m["outputs"].items():
            want = np.fromfile(f".device_in/{name}.out.{k}.bin", dtype=np_dtype[d]).reshape(s)
            g = got[k].astype(np.float64); w = want.astype(np.float64)
            both = np.isfinite(g) & np.isfinite(w)
            diff = max(diff, float(np.abs(g[both] - w[both]).max()) if both.any() else 0.0, float((np.isnan(g) != np.isnan(w)).sum()))
        worst[name] = diff
    except Exception as e:
        worst[name] = "ERROR " + str(e)[:300]
report["kiln_exports_vs_ort"] = worst
json.dump(report, open(f"{tmp}/more.json", "w"), indent=1)
with tarfile.open(f"{out}/more.tar.gz", "w:gz") as t:
    for f in os.listdir(tmp): t.add(f"{tmp}/{f}", arcname=f)
print(json.dumps(worst))

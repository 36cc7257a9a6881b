# A third round of probes (see export_probe.py): a decoder step with a key/value cache of symbolic
# length, and models quantized by ONNX Runtime's own tools (dynamic MatMulInteger, static QDQ
# with per-channel weights, QOperator). usage: python3 export_probe3.py OUT_DIR
import json, os, sys, tarfile, numpy as np, onnx, onnxruntime as ort, torch
from torch import nn
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic,
                                      quantize_static)
torch.manual_seed(2); np.random.seed(2)
F = nn.functional
out = sys.argv[1]; tmp = "/tmp/probe3"; os.makedirs(tmp, exist_ok=True)
report = {}


def record(tag, path, feeds):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    y = sess.run(None, feeds)[0]
    for k, v in feeds.items(): v.tofile(f"{tmp}/{tag}.in.{k}.{v.dtype}.bin")
    y.astype(np.float32).tofile(f"{tmp}/{tag}.out.y.float32.bin")
    mp = onnx.load(path)
    report[tag] = {"inputs": {k: [list(v.shape), str(v.dtype)] for k, v in feeds.items()},
                   "output": [list(y.shape), "float32"], "ort_vs_torch": 0.0,
                   "ops": sorted({(n.domain + "::" if n.domain else "") + n.op_type for n in mp.graph.node}),
                   "opset": [o.version for o in mp.opset_import], "bytes": os.path.getsize(path)}
    print(tag, "ok", report[tag]["opset"], report[tag]["ops"])


class Step(nn.Module):  # one decoding step: append to the cache, attend over all of it
    def __init__(s):
        super().__init__(); s.emb = nn.Embedding(50, 32); s.qkv = nn.Linear(32, 96); s.o = nn.Linear(32, 32)
        s.head = nn.Linear(32, 50)
    def forward(s, ids, past_k, past_v):  # ids [1, 1], past [1, 4, T, 8]
        x = s.emb(ids); q, k, v = s.qkv(x).view(1, 1, 3, 4, 8).permute(2, 0, 3, 1, 4)
        k = torch.cat([past_k, k], 2); v = torch.cat([past_v, v], 2)
        a = torch.softmax(q @ k.transpose(-1, -2) / 8 ** 0.5, -1) @ v
        return s.head(s.o(a.transpose(1, 2).reshape(1, 1, 32))), k, v


step = Step().eval()
args = (torch.tensor([[7]]), torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8))
feeds = {"ids": args[0].numpy(), "past_k": args[1].numpy(), "past_v": args[2].numpy()}
for dynamo in (False, True):
    tag = f"kv_step_{'dyn' if dynamo else 'ts'}"; path = f"{tmp}/{tag}.onnx"
    try:
        with torch.no_grad():
            if dynamo:
                t = torch.export.Dim("t", min=1, max=64)
                torch.onnx.export(step, args, path, input_names=list(feeds), output_names=["y", "k", "v"], dynamo=True,
                                  dynamic_shapes={"ids": None, "past_k": {2: t}, "past_v": {2: t}})
            else:
                torch.onnx.export(step, args, path, input_names=list(feeds), output_names=["y", "k", "v"],
                                  opset_version=17, dynamo=False,
                                  dynamic_axes={"past_k": {2: "t"}, "past_v": {2: "t"}})
        mp = onnx.load(path, load_external_data=True); onnx.save(mp, path)
        record(tag, path, feeds)
    except Exception as e:
        print(tag, "failed:", str(e)[:400])


class Net(nn.Module):  # a small CNN and MLP head for the quantizers
    def __init__(s):
        super().__init__(); s.c1 = nn.Conv2d(3, 16, 3, padding=1); s.c2 = nn.Conv2d(16, 16, 3, 2, 1)
        s.fc1 = nn.Linear(16 * 8 * 8, 64); s.fc2 = nn.Linear(64, 10)
    def forward(s, x):
        x = F.relu(s.c2(F.relu(s.c1(x)))); return s.fc2(F.relu(s.fc1(x.flatten(1))))


fp32 = f"{tmp}/net_fp32.onnx"; x = torch.randn(2, 3, 16, 16)
torch.onnx.export(Net().eval(), (x,), fp32, input_names=["x"], output_names=["y"], opset_version=17, dynamo=False)


class Reader(CalibrationDataReader):
    def __init__(s): s.n = 0
    def get_next(s):
        s.n += 1
        return {"x": np.random.randn(2, 3, 16, 16).astype(np.float32)} if s.n <= 8 else None


variants = {
    "q_dynamic": lambda p: quantize_dynamic(fp32, p, weight_type=QuantType.QUInt8),
    "q_dynamic_s8": lambda p: quantize_dynamic(fp32, p, weight_type=QuantType.QInt8, per_channel=True),
    "q_qdq": lambda p: quantize_static(fp32, p, Reader(), quant_format=QuantFormat.QDQ, per_channel=True),
    "q_qoperator": lambda p: quantize_static(fp32, p, Reader(), quant_format=QuantFormat.QOperator),
}
for tag, make in variants.items():
    path = f"{tmp}/{tag}.onnx"
    try:
        make(path); record(tag, path, {"x": x.numpy()})
    except Exception as e:
        print(tag, "failed:", str(e)[:400])
os.remove(fp32)
report["versions"] = {"torch": torch.__version__, "onnx": onnx.__version__, "ort": ort.__version__}
json.dump(report, open(f"{tmp}/probe.json", "w"), indent=1)
with tarfile.open(f"{out}/probe3.tar.gz", "w:gz") as t:
    for f in os.listdir(tmp): t.add(f"{tmp}/{f}", arcname=f)

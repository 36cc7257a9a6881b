# A decoder block as PyTorch exports it at opset 23, where its SDPA (causal, grouped-query heads)
# and RMS norms become ONNX's own Attention and RMSNormalization ops. The output y is recorded
# with ONNX Runtime's CPU provider (or ONNX's reference where it has no kernel for them).
# Run on the GPU machine (torch, onnx, onnxruntime):  python3 export_opset23.py OUT_DIR
import sys
import numpy as np, onnx, onnxruntime as ort, torch
import torch.nn.functional as F

out = sys.argv[1] if len(sys.argv) > 1 else "."
torch.manual_seed(23)


class Block(torch.nn.Module):
    def __init__(s, d=64, heads=4, kv_heads=2):
        super().__init__()
        s.h, s.kv, s.hd = heads, kv_heads, d // heads
        s.q = torch.nn.Linear(d, d, bias=False)
        s.k = torch.nn.Linear(d, kv_heads * s.hd, bias=False)
        s.v = torch.nn.Linear(d, kv_heads * s.hd, bias=False)
        s.o = torch.nn.Linear(d, d, bias=False)
        s.up = torch.nn.Linear(d, 2 * d, bias=False)
        s.down = torch.nn.Linear(2 * d, d, bias=False)
        s.n1 = torch.nn.RMSNorm(d, eps=1e-6)
        s.n2 = torch.nn.RMSNorm(d, eps=1e-6)

    def forward(s, x):
        b, t, d = x.shape
        h = s.n1(x)
        q = s.q(h).view(b, t, s.h, s.hd).transpose(1, 2)
        k = s.k(h).view(b, t, s.kv, s.hd).transpose(1, 2)
        v = s.v(h).view(b, t, s.kv, s.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + s.o(a.transpose(1, 2).reshape(b, t, d))
        return x + s.down(F.silu(s.up(s.n2(x))))


m = Block().eval()
x = torch.randn(2, 12, 64)
name = "llm_opset23"
torch.onnx.export(m, (x,), f"{out}/{name}.onnx", input_names=["x"], output_names=["y"],
                  opset_version=23, dynamo=True)
model = onnx.load(f"{out}/{name}.onnx")
print("opset", [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")],
      sorted({n.op_type for n in model.graph.node}))
try:
    y = ort.InferenceSession(f"{out}/{name}.onnx").run(None, {"x": x.numpy()})[0]
    print("ORT", ort.__version__)
except Exception as e:  # no kernel for an opset-23 op
    from onnx.reference import ReferenceEvaluator
    y = ReferenceEvaluator(model).run(None, {"x": x.numpy()})[0]
    print("reference (ORT:", str(e)[:120], ")")
print("torch vs recorded", float(np.abs(m(x).detach().numpy() - y).max()))
x.numpy().tofile(f"{out}/{name}.in.x.float32.bin")
y.astype(np.float32).tofile(f"{out}/{name}.out.y.float32.bin")

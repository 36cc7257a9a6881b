# Runs on the GPU machine (torch, onnx, onnxruntime): architectures the other exports do not
# cover, each through both of PyTorch's exporters (TorchScript at opset 17 and dynamo at its
# default opset: they emit different op patterns), with ONNX Runtime's output, to probe what a
# new user's models meet. usage: python3 export_probe.py OUT_DIR (writes probe.tar.gz). All twelve
# ran on every backend within 1e-4 of ONNX Runtime once kiln read opset 18's num_outputs and
# noop_with_empty_axes; four dynamo exports are kept here: gpt_split_dyn as gpt_dynamo, llama_rms_dyn
# as llama_dynamo, vgg_pools_dyn as vgg_dynamo, efficient_se_dyn as efficient_se_dynamo.
import os, sys, json, tarfile, numpy as np, onnx, onnxruntime as ort, torch
from export_record import export_one
from torch import nn
torch.manual_seed(0); np.random.seed(0)
F = nn.functional


class ConvNeXt(nn.Module):  # depthwise 7x7, channels-last LayerNorm, GELU MLP, layer scale
    def __init__(s):
        super().__init__(); s.stem = nn.Conv2d(3, 32, 4, 4)
        s.dw = nn.Conv2d(32, 32, 7, padding=3, groups=32); s.ln = nn.LayerNorm(32)
        s.fc1 = nn.Linear(32, 128); s.fc2 = nn.Linear(128, 32); s.gamma = nn.Parameter(torch.full((32,), 0.5))
        s.down = nn.Conv2d(32, 64, 2, 2); s.head = nn.Linear(64, 10)
    def forward(s, x):
        x = s.stem(x); r = x
        h = s.dw(x).permute(0, 2, 3, 1); h = s.fc2(F.gelu(s.fc1(s.ln(h)))) * s.gamma
        x = r + h.permute(0, 3, 1, 2); x = s.down(x)
        return s.head(x.mean((2, 3)))


class EfficientSE(nn.Module):  # MBConv: SiLU, stride-2 depthwise 5x5, squeeze-excite, hardswish
    def __init__(s):
        super().__init__(); s.stem = nn.Conv2d(3, 16, 3, 2, 1); s.bn = nn.BatchNorm2d(16)
        s.exp = nn.Conv2d(16, 64, 1); s.dw = nn.Conv2d(64, 64, 5, 2, 2, groups=64); s.bn2 = nn.BatchNorm2d(64)
        s.se1 = nn.Conv2d(64, 8, 1); s.se2 = nn.Conv2d(8, 64, 1); s.proj = nn.Conv2d(64, 24, 1)
        s.pool = nn.AdaptiveAvgPool2d(2); s.fc = nn.Linear(96, 5)
    def forward(s, x):
        x = F.silu(s.bn(s.stem(x))); h = F.silu(s.exp(x)); h = F.hardswish(s.bn2(s.dw(h)))
        w = torch.sigmoid(s.se2(F.silu(s.se1(F.adaptive_avg_pool2d(h, 1))))); h = s.proj(h * w)
        return s.fc(torch.flatten(s.pool(h), 1))


class Gpt(nn.Module):  # fused qkv split, heads by view/transpose, causal SDPA, tanh GELU, tied head
    def __init__(s):
        super().__init__(); s.wte = nn.Embedding(64, 48); s.wpe = nn.Embedding(16, 48)
        s.ln1 = nn.LayerNorm(48); s.qkv = nn.Linear(48, 144); s.proj = nn.Linear(48, 48)
        s.ln2 = nn.LayerNorm(48); s.fc = nn.Linear(48, 192); s.out = nn.Linear(192, 48); s.lnf = nn.LayerNorm(48)
    def forward(s, ids):
        b, t = ids.shape; x = s.wte(ids) + s.wpe(torch.arange(t))
        q, k, v = s.qkv(s.ln1(x)).split(48, dim=2)
        heads = lambda z: z.view(b, t, 4, 12).transpose(1, 2)
        a = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + s.proj(a.transpose(1, 2).reshape(b, t, 48))
        x = x + s.out(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))
        return s.lnf(x) @ s.wte.weight.T


class Bert(nn.Module):  # post-norm encoder with a padding mask from lengths, pooler on [CLS]
    def __init__(s):
        super().__init__(); s.emb = nn.Embedding(50, 32); s.pos = nn.Embedding(10, 32); s.ln = nn.LayerNorm(32)
        s.enc = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation="gelu", batch_first=True)
        s.pool = nn.Linear(32, 32); s.cls = nn.Linear(32, 3)
    def forward(s, ids, lengths):
        t = ids.shape[1]; x = s.ln(s.emb(ids) + s.pos(torch.arange(t)))
        pad = torch.arange(t)[None, :] >= lengths[:, None]
        x = s.enc(x, src_key_padding_mask=pad)
        return s.cls(torch.tanh(s.pool(x[:, 0])))


class Vgg(nn.Module):  # max pools, a ceil-mode average pool, adaptive pool to 3x3, dropout
    def __init__(s):
        super().__init__(); s.c1 = nn.Conv2d(3, 8, 3, padding=1); s.c2 = nn.Conv2d(8, 16, 3, padding=1)
        s.fc = nn.Sequential(nn.Flatten(), nn.Dropout(0.5), nn.Linear(144, 7))
    def forward(s, x):
        x = F.max_pool2d(F.relu(s.c1(x)), 2); x = F.avg_pool2d(F.relu(s.c2(x)), 3, 2, ceil_mode=True)
        return s.fc(F.adaptive_avg_pool2d(x, 3))


class Llama(nn.Module):  # RMSNorm (pow, mean, rsqrt), SwiGLU, rotary-free attention by matmuls
    def __init__(s):
        super().__init__(); s.w1 = nn.Linear(32, 64, bias=False); s.w3 = nn.Linear(32, 64, bias=False)
        s.w2 = nn.Linear(64, 32, bias=False); s.g = nn.Parameter(torch.ones(32)); s.q = nn.Linear(32, 32, bias=False)
        s.k = nn.Linear(32, 32, bias=False)
    def rms(s, x): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * s.g
    def forward(s, x):
        h = s.rms(x); att = torch.softmax(s.q(h) @ s.k(h).transpose(-1, -2) / 32 ** 0.5, -1)
        x = x + att @ h
        return x + s.w2(F.silu(s.w1(s.rms(x))) * s.w3(s.rms(x)))


models = {
    "convnext": (ConvNeXt().eval(), (torch.randn(2, 3, 32, 32),), ["x"]),
    "efficient_se": (EfficientSE().eval(), (torch.randn(2, 3, 32, 32),), ["x"]),
    "gpt_split": (Gpt().eval(), (torch.randint(0, 64, (2, 11)),), ["ids"]),
    "bert_pad": (Bert().eval(), (torch.randint(0, 50, (3, 9)), torch.tensor([9, 5, 2])), ["ids", "lengths"]),
    "vgg_pools": (Vgg().eval(), (torch.randn(2, 3, 28, 28),), ["x"]),
    "llama_rms": (Llama().eval(), (torch.randn(2, 7, 32),), ["x"]),
}
def probe(models, out, tmp, archive):
    """Exports each model through both exporters into tmp, with ONNX Runtime's output and the
    inputs, writes probe.json there and OUT/ARCHIVE (a .tar.gz of tmp)."""
    os.makedirs(tmp, exist_ok=True)
    report = {}
    for name, (m, args, names) in models.items():
        for dynamo in (False, True):
            tag = f"{name}_{'dyn' if dynamo else 'ts'}"
            try:
                report[tag] = export_one(tmp, tag, m, args, names, dynamo)
                print(tag, "ok", report[tag]["opset"], report[tag]["ops"])
            except Exception as e:
                print(tag, "failed:", str(e)[:400])
    report["versions"] = {"torch": torch.__version__, "onnx": onnx.__version__, "ort": ort.__version__}
    json.dump(report, open(f"{tmp}/probe.json", "w"), indent=1)
    with tarfile.open(f"{out}/{archive}", "w:gz") as t:
        for f in os.listdir(tmp): t.add(f"{tmp}/{f}", arcname=f)


if __name__ == "__main__":
    probe(models, sys.argv[1], "/tmp/probe", "probe.tar.gz")

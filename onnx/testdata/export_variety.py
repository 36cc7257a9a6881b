# Runs on the GPU machine (torch, onnx, onnxruntime): seven more architectures, each exported
# with ONNX Runtime's output, for onnx/testdata/ — a GPT-style causal decoder, a 2-layer LSTM, a
# bidirectional GRU, a generator (ConvTranspose, GroupNorm, InstanceNorm, bilinear Resize, SiLU),
# a MobileNetV2-like net, a Conv1d audio model, and a mix of ops (Einsum, CumSum, ArgMax,
# GatherElements, ReduceProd). usage: python3 export_variety.py OUT_DIR (writes variety.tar.gz;
# export_record.py beside it)
import os, sys, json, tarfile, numpy as np, torch
from torch import nn
from export_record import export
torch.manual_seed(0); np.random.seed(0)
F = nn.functional
out = sys.argv[1]; tmp = "/tmp/variety"; os.makedirs(tmp, exist_ok=True)

class Decoder(nn.Module):  # causal self-attention (Trilu mask), pre-norm, GELU MLP, tied head
    def __init__(s):
        super().__init__(); s.emb = nn.Embedding(100, 64); s.pos = nn.Parameter(torch.randn(16, 64) * 0.1)
        s.ln1 = nn.LayerNorm(64); s.attn = nn.MultiheadAttention(64, 4, batch_first=True); s.ln2 = nn.LayerNorm(64)
        s.mlp = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64)); s.lnf = nn.LayerNorm(64)
    def forward(s, ids):
        t = ids.shape[1]; x = s.emb(ids) + s.pos[:t]
        mask = torch.triu(torch.full((t, t), float("-inf")), 1)
        h = s.ln1(x); x = x + s.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        x = x + s.mlp(s.ln2(x)); return s.lnf(x) @ s.emb.weight.T

class Lstm(nn.Module):
    def __init__(s):
        super().__init__(); s.rnn = nn.LSTM(12, 24, num_layers=2, batch_first=True); s.head = nn.Linear(24, 3)
    def forward(s, x): return s.head(s.rnn(x)[0])

class Gru(nn.Module):
    def __init__(s):
        super().__init__(); s.rnn = nn.GRU(10, 20, batch_first=True, bidirectional=True); s.head = nn.Linear(40, 4)
    def forward(s, x): return torch.tanh(s.head(s.rnn(x)[0][:, -1]))

class Generator(nn.Module):
    def __init__(s):
        super().__init__()
        s.up1 = nn.ConvTranspose2d(16, 16, 4, 2, 1); s.gn = nn.GroupNorm(4, 16); s.c = nn.Conv2d(16, 8, 3, padding=1)
        s.inorm = nn.InstanceNorm2d(8, affine=True); s.out = nn.Conv2d(8, 3, 1)
    def forward(s, z):
        x = F.silu(s.gn(s.up1(z))); x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        return torch.sigmoid(s.out(F.relu(s.inorm(s.c(x)))))

class MobileV2(nn.Module):  # inverted residuals with ReLU6, global pool, dropout, classifier
    def __init__(s):
        super().__init__()
        def ir(i, o, st, e):
            h = i * e
            return nn.Sequential(nn.Conv2d(i, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
                                 nn.Conv2d(h, h, 3, st, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
                                 nn.Conv2d(h, o, 1, bias=False), nn.BatchNorm2d(o))
        s.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
        s.b1 = ir(16, 16, 1, 4); s.b2 = ir(16, 24, 2, 6); s.drop = nn.Dropout(0.2); s.fc = nn.Linear(24, 10)
    def forward(s, x):
        x = s.stem(x); x = x + s.b1(x); x = s.b2(x)
        return s.fc(s.drop(x.mean((2, 3))))

class Audio(nn.Module):  # Conv1d front end, LayerNorm over channels, attention pooling
    def __init__(s):
        super().__init__(); s.c1 = nn.Conv1d(1, 16, 9, stride=4, padding=4); s.c2 = nn.Conv1d(16, 32, 5, stride=2, padding=2)
        s.ln = nn.LayerNorm(32); s.score = nn.Linear(32, 1); s.out = nn.Linear(32, 6)
    def forward(s, w):
        x = F.gelu(s.c1(w)); x = F.gelu(s.c2(x)).transpose(1, 2); x = s.ln(x)
        a = torch.softmax(s.score(x), 1); return s.out((a * x).sum(1))

class Misc(nn.Module):
    def __init__(s):
        super().__init__(); s.w = nn.Parameter(torch.randn(8, 8))
    def forward(s, x):
        c = torch.cumsum(x, -1); y = torch.where(c > 0, c, 0.1 * c)
        z = torch.einsum("bij,jk->bik", y, s.w); g = torch.gather(z, -1, z.argmax(-1, keepdim=True))
        return torch.clamp(z - g, -3, 3) ** 2 + torch.erf(z) + z.std(-1, keepdim=True)

models = {
    "decoder_causal": (Decoder().eval(), (torch.randint(0, 100, (2, 12)),), ["ids"]),
    "lstm2": (Lstm().eval(), (torch.randn(3, 9, 12),), ["x"]),
    "gru_bi": (Gru().eval(), (torch.randn(2, 7, 10),), ["x"]),
    "generator": (Generator().eval(), (torch.randn(2, 16, 6, 6),), ["z"]),
    "mobilenet_v2ish": (MobileV2().eval(), (torch.randn(2, 3, 32, 32),), ["x"]),
    "audio_conv1d": (Audio().eval(), (torch.randn(2, 1, 400),), ["w"]),
    "misc_ops": (Misc().eval(), (torch.randn(2, 5, 8),), ["x"]),
}
report = {name: export(tmp, name, m, args, names) for name, (m, args, names) in models.items()}
json.dump(report, open(f"{tmp}/variety.json", "w"), indent=1)
with tarfile.open(f"{out}/variety.tar.gz", "w:gz") as t:
    for f in os.listdir(tmp): t.add(f"{tmp}/{f}", arcname=f)

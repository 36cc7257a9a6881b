# A second round of probes (see export_probe.py, beside it): shifted-window attention, an audio
# encoder with sinusoidal positions, DETR-style cross-attention, a UNet with nearest upsampling and
# GroupNorm, T5-style bucketed relative positions (integer arithmetic), pixel shuffle with bicubic
# resizing, top-k and sort, scatter-add and one-hot. usage: python3 export_probe2.py OUT_DIR
import math, sys, torch
from torch import nn
from export_probe import probe
torch.manual_seed(1)
F = nn.functional


class Swin(nn.Module):  # window partition by reshape/permute, cyclic shift (roll), relative bias
    def __init__(s):
        super().__init__(); s.qkv = nn.Linear(16, 48); s.proj = nn.Linear(16, 16)
        s.bias = nn.Parameter(torch.randn(9, 2) * 0.1)  # (2·2−1)² offsets × 2 heads
        c = torch.stack(torch.meshgrid(torch.arange(2), torch.arange(2), indexing="ij")).flatten(1)
        rel = (c[:, :, None] - c[:, None, :]).permute(1, 2, 0) + 1
        s.register_buffer("index", rel[..., 0] * 3 + rel[..., 1])
    def forward(s, x):  # x [B, 4, 4, 16]
        b = x.shape[0]; x = torch.roll(x, (-1, -1), (1, 2))
        w = x.view(b, 2, 2, 2, 2, 16).permute(0, 1, 3, 2, 4, 5).reshape(-1, 4, 16)
        q, k, v = s.qkv(w).view(-1, 4, 3, 2, 8).permute(2, 0, 3, 1, 4)
        a = (q @ k.transpose(-2, -1)) / math.sqrt(8) + s.bias[s.index].permute(2, 0, 1)
        o = (a.softmax(-1) @ v).transpose(1, 2).reshape(-1, 4, 16)
        o = s.proj(o).view(b, 2, 2, 2, 2, 16).permute(0, 1, 3, 2, 4, 5).reshape(b, 4, 4, 16)
        return torch.roll(o, (1, 1), (1, 2))


class Whisper(nn.Module):  # conv front end, sinusoidal positions, pre-norm encoder layer
    def __init__(s):
        super().__init__(); s.c1 = nn.Conv1d(8, 32, 3, padding=1); s.c2 = nn.Conv1d(32, 32, 3, 2, 1)
        pos = torch.arange(12)[:, None] * torch.exp(-math.log(1e4) * torch.arange(0, 32, 2) / 32)
        s.register_buffer("pos", torch.cat([pos.sin(), pos.cos()], 1))
        s.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
    def forward(s, mel):  # [B, 8, 24]
        x = F.gelu(s.c2(F.gelu(s.c1(mel)))).transpose(1, 2) + s.pos
        return s.layer(x)


class Detr(nn.Module):  # learned queries cross-attending to flattened features, box head
    def __init__(s):
        super().__init__(); s.backbone = nn.Conv2d(3, 32, 4, 4); s.q = nn.Parameter(torch.randn(5, 32))
        s.cross = nn.MultiheadAttention(32, 4, batch_first=True); s.box = nn.Linear(32, 4); s.cls = nn.Linear(32, 3)
    def forward(s, img):
        f = s.backbone(img).flatten(2).transpose(1, 2)
        q = s.q.expand(img.shape[0], -1, -1); h = s.cross(q, f, f, need_weights=False)[0]
        return torch.cat([s.box(h).sigmoid(), s.cls(h).softmax(-1)], -1)


class UNet(nn.Module):  # GroupNorm, SiLU, nearest upsampling, skip concatenation
    def __init__(s):
        super().__init__(); s.d = nn.Conv2d(3, 16, 3, 2, 1); s.gn = nn.GroupNorm(4, 16)
        s.m = nn.Conv2d(16, 16, 3, padding=1); s.u = nn.Conv2d(19, 8, 3, padding=1)
    def forward(s, x):
        h = F.silu(s.gn(s.d(x))); h = F.silu(s.m(h))
        return s.u(torch.cat([F.interpolate(h, scale_factor=2.0, mode="nearest"), x], 1))


class T5Bias(nn.Module):  # bucketed relative positions: integer log buckets, embedding lookup
    def __init__(s):
        super().__init__(); s.emb = nn.Embedding(8, 2); s.q = nn.Linear(16, 16)
    def forward(s, x):  # [B, 6, 16]
        t = x.shape[1]; rel = torch.arange(t)[None, :] - torch.arange(t)[:, None]
        n = rel.abs(); small = n < 2
        big = 2 + (torch.log(n.float().clamp(min=1) / 2) / math.log(4) * 2).long()
        bucket = torch.where(small, n, big.clamp(max=3)) + (rel > 0).long() * 4
        bias = s.emb(bucket).permute(2, 0, 1)  # [2, t, t]
        h = s.q(x).view(x.shape[0], t, 2, 8).transpose(1, 2)
        return ((h @ h.transpose(-1, -2)) + bias).softmax(-1)


class Shuffle(nn.Module):  # pixel shuffle (DepthToSpace), bicubic resize, instance norm
    def __init__(s):
        super().__init__(); s.c = nn.Conv2d(3, 12, 3, padding=1); s.n = nn.InstanceNorm2d(3)
    def forward(s, x):
        y = F.pixel_shuffle(s.c(x), 2)
        return s.n(F.interpolate(y, size=(10, 10), mode="bicubic", align_corners=True))


class TopK(nn.Module):  # top-k values and their indices gathered back, a sort, cumsum
    def forward(s, x):  # [3, 10]
        v, i = x.topk(4, -1); srt = x.sort(-1, descending=True).values
        return torch.cat([v, torch.gather(x, 1, i) * 2, srt[:, -2:], x.cumsum(-1)[:, :3]], -1)


class Scatter(nn.Module):  # scatter_add over classes, one-hot of an argmax, masked fill
    def forward(s, x, idx):  # x [4, 6], idx [4, 6] in 0..2
        sums = torch.zeros(4, 3).scatter_add(1, idx, x)
        hot = F.one_hot(sums.argmax(-1), 3).float()
        return sums.masked_fill(hot > 0, -1.0) + hot


models = {
    "swin_window": (Swin().eval(), (torch.randn(2, 4, 4, 16),), ["x"]),
    "whisper_enc": (Whisper().eval(), (torch.randn(2, 8, 24),), ["mel"]),
    "detr_cross": (Detr().eval(), (torch.randn(2, 3, 16, 16),), ["img"]),
    "unet_gn": (UNet().eval(), (torch.randn(2, 3, 16, 16),), ["x"]),
    "t5_bias": (T5Bias().eval(), (torch.randn(2, 6, 16),), ["x"]),
    "shuffle_cubic": (Shuffle().eval(), (torch.randn(2, 3, 6, 6),), ["x"]),
    "topk_sort": (TopK().eval(), (torch.randn(3, 10),), ["x"]),
    "scatter_hot": (Scatter().eval(), (torch.randn(4, 6), torch.randint(0, 3, (4, 6))), ["x", "idx"]),
}
probe(models, sys.argv[1], "/tmp/probe2", "probe2.tar.gz")

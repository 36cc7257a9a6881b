# Runs on the GPU machine (torch, onnx, onnxruntime): a small block whose ops PyTorch's dynamo
# exporter writes as ONNX's GroupNormalization (opset 21 and later) and Col2Im (nn.Fold, opset 18
# and later), as wav2vec2 and MobileViTV2 export at opset 23, with ONNX Runtime's output.
# usage: python3 export_norm_fold.py OUT_DIR
import sys, numpy as np, torch
from torch import nn
from export_record import export_one

torch.manual_seed(0)


class NormFold(nn.Module):
    def __init__(s):
        super().__init__()
        s.conv = nn.Conv2d(3, 16, 3, padding=1)
        s.norm = nn.GroupNorm(4, 16)
        s.unfold = nn.Unfold(kernel_size=2, stride=2)
        s.fold = nn.Fold(output_size=(8, 8), kernel_size=2, stride=2)
        s.mix = nn.Linear(16 * 4, 16 * 4)
        s.overlap = nn.Fold(output_size=(7, 7), kernel_size=3, stride=2, padding=1)
        s.norm2 = nn.GroupNorm(2, 4, eps=1e-3)

    def forward(s, x):
        h = torch.relu(s.norm(s.conv(x)))                      # [N, 16, 8, 8]
        p = s.unfold(h)                                        # [N, 64, 16]
        p = s.mix(p.transpose(1, 2)).transpose(1, 2)           # patches mixed
        y = s.fold(p)                                          # [N, 16, 8, 8]
        q = y.reshape(y.shape[0], 64, 16)[:, :36]              # 16 overlapping 3x3 windows, 4 channels
        z = s.overlap(q)                                       # [N, 4, 7, 7]
        return s.norm2(z)


if __name__ == "__main__":
    out = sys.argv[1]
    m = NormFold().eval()
    print(export_one(out, "norm_fold_opset23", m, (torch.randn(2, 3, 8, 8),), ["x"], True, dynamo_opset=23))

# Runs on the GPU machine (torch, onnx, onnxruntime): a small U-Net — InstanceNorm'd conv blocks,
# max-pool downsampling, a ConvTranspose and a bilinear Resize upsampling, Concat skips — exported
# with ONNX Runtime's output, for onnx/testdata/unet.*.  usage: python3 export_unet.py OUT_DIR
# (export_record.py beside it)
import sys, json, torch
from torch import nn
from export_record import export
torch.manual_seed(0)
out = sys.argv[1]

def block(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.InstanceNorm2d(o, affine=True), nn.ReLU(),
                         nn.Conv2d(o, o, 3, padding=1), nn.InstanceNorm2d(o, affine=True), nn.ReLU())

class UNet(nn.Module):
    def __init__(s):
        super().__init__()
        s.enc1, s.enc2, s.mid = block(3, 8), block(8, 16), block(16, 32)
        s.up2 = nn.ConvTranspose2d(32, 16, 2, stride=2)
        s.dec2 = block(32, 16)
        s.up1 = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False), nn.Conv2d(16, 8, 1))
        s.dec1 = block(16, 8)
        s.head = nn.Conv2d(8, 2, 1)
    def forward(s, x):
        e1 = s.enc1(x); e2 = s.enc2(nn.functional.max_pool2d(e1, 2))
        m = s.mid(nn.functional.max_pool2d(e2, 2))
        d2 = s.dec2(torch.cat([s.up2(m), e2], 1))
        d1 = s.dec1(torch.cat([s.up1(d2), e1], 1))
        return s.head(d1)

model = UNet().eval()
x = torch.randn(1, 3, 32, 32)
info = export(out, "unet", model, (x,), ["x"])
json.dump(info, open(f"{out}/unet.json", "w"), indent=1)
print(json.dumps(info))

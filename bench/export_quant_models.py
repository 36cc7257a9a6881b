"""Quantized models as ONNX Runtime's own quantizers make them, for the GPU machine (no network:
random weights). Writes OUT/NAME.onnx, its inputs (NAME.in.INPUT.DTYPE.bin), ONNX Runtime CPU's
output (NAME.out.y.float32.bin) and OUT/models.json, the layout `bench/models.ts` reads through
KILN_EXPORTS_DIR.

    python3 bench/export_quant_models.py OUT            # full size: BERT-base f32 and dynamic
                                                        # int8, ResNet-50 f32 and static QDQ int8
    python3 bench/export_quant_models.py OUT --small    # the test models of onnx/testdata/

Dynamic int8 is `quantize_dynamic` (DynamicQuantizeLinear, MatMulInteger); static is
`quantize_static` in the QDQ format with per-channel weights, calibrated on random inputs.
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
import torch
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_dynamic, quantize_static)

from export_full_models import BertWrap  # bench/ is the script's own folder

torch.manual_seed(0)
np.random.seed(0)
ENTRIES = {}


def record(out, name, path, feeds):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    y = sess.run(None, feeds)[0]
    for k, v in feeds.items():
        v.tofile(os.path.join(out, f"{name}.in.{k}.{v.dtype}.bin"))
    y.astype(np.float32).tofile(os.path.join(out, f"{name}.out.y.float32.bin"))
    mp = onnx.load(path)
    ENTRIES[name] = {
        "inputs": {k: [list(v.shape), str(v.dtype)] for k, v in feeds.items()},
        "output": [list(y.shape), "float32"],
        "ops": sorted({(n.domain + "::" if n.domain else "") + n.op_type for n in mp.graph.node}),
        "opset": [o.version for o in mp.opset_import],
    }
    print(name, os.path.getsize(path) // 1024, "KiB", ENTRIES[name]["ops"], flush=True)


def export(model, args, names, path):
    model.eval()
    with torch.no_grad():
        torch.onnx.export(model, tuple(args), path, input_names=names, output_names=["y"],
                          opset_version=17, dynamo=False)
    # One file (the TorchScript exporter keeps large models inline; small ones always are).
    onnx.save(onnx.load(path, load_external_data=True), path)


class Reader(CalibrationDataReader):
    def __init__(self, make, n):
        self.make, self.n = make, n

    def get_next(self):
        self.n -= 1
        return self.make() if self.n >= 0 else None


def dynamic(out, name, fp32, feeds):
    path = os.path.join(out, f"{name}.onnx")
    quantize_dynamic(fp32, path, weight_type=QuantType.QInt8)
    record(out, name, path, feeds)


def static(out, name, fp32, feeds, make, n):
    path = os.path.join(out, f"{name}.onnx")
    quantize_static(fp32, path, Reader(make, n), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    record(out, name, path, feeds)


def bert(out, name, config, seq):
    import transformers as tf
    model = BertWrap(tf.BertModel(config))
    ids = torch.randint(0, config.vocab_size, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.int64)
    fp32 = os.path.join(out, f"{name}.onnx")
    export(model, [ids, mask], ["input_ids", "attention_mask"], fp32)
    feeds = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    record(out, name, fp32, feeds)
    dynamic(out, f"{name}_int8", fp32, feeds)


def cnn(out, name, model, shape, calibrate):
    x = torch.randn(*shape)
    fp32 = os.path.join(out, f"{name}.onnx")
    export(model, [x], ["x"], fp32)
    feeds = {"x": x.numpy()}
    record(out, name, fp32, feeds)
    make = lambda: {"x": np.random.randn(*shape).astype(np.float32)}
    static(out, f"{name}_qdq", fp32, feeds, make, calibrate)


class SmallNet(torch.nn.Module):
    """Conv, strided conv, a depthwise conv and a two-layer head (K = 512 and 96 > 2^24 / 255²)."""

    def __init__(self):
        super().__init__()
        f = torch.nn
        self.body = f.Sequential(f.Conv2d(3, 16, 3, padding=1), f.ReLU(),
                                 f.Conv2d(16, 32, 3, 2, 1), f.ReLU(),
                                 f.Conv2d(32, 32, 3, padding=1, groups=32), f.ReLU())
        self.head = f.Sequential(f.Flatten(), f.Linear(32 * 4 * 4, 96), f.ReLU(), f.Linear(96, 10))
        self.pool = f.AdaptiveAvgPool2d(4)

    def forward(self, x):
        return self.head(self.pool(self.body(x)))


def main(out, small):
    os.makedirs(out, exist_ok=True)
    import transformers as tf
    if small:
        # Hidden 320 and intermediate 640: every MatMulInteger sums past 2^24 / 255² terms, where
        # products summed in f32 round and ONNX Runtime's int32 sums do not.
        config = tf.BertConfig(vocab_size=256, hidden_size=320, num_hidden_layers=1,
                               num_attention_heads=4, intermediate_size=640,
                               max_position_embeddings=64)
        bert(out, "quant_bert_tiny", config, 24)
        cnn(out, "quant_cnn", SmallNet(), (2, 3, 16, 16), 8)
        for name in ("quant_bert_tiny", "quant_cnn"):  # the f32 forms stay out of the test set
            for f in os.listdir(out):
                if f.startswith(name + ".") :
                    os.remove(os.path.join(out, f))
            ENTRIES.pop(name)
    else:
        bert(out, "bert_base", tf.BertConfig(), 128)
        import torchvision
        resnet = torchvision.models.resnet50()
        resnet.train()
        with torch.no_grad():  # calibrated BatchNorm statistics keep activations in range
            for _ in range(4):
                resnet(torch.randn(8, 3, 224, 224))
        cnn(out, "resnet50", resnet.eval(), (1, 3, 224, 224), 4)
    with open(os.path.join(out, "models.json"), "w") as f:
        json.dump(ENTRIES, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], "--small" in sys.argv)

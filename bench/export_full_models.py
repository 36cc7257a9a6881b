"""Full-size models as users export them, for the GPU machine (no network: random weights).

Writes OUT/NAME.onnx and OUT/NAME.in.INPUT.DTYPE.bin (the input kiln runs with) for ResNet-50 at
batch 1 and 8 (torchvision, BatchNorm statistics calibrated on a few random batches so the
activations stay in range), BERT-base at sequence 128, GPT-2 small at 128 tokens (with its logits,
and its blocks alone as GPT2Model) and ViT-B/16 at 224x224, each with torch.onnx.export at opset
17 (the TorchScript exporter, as most published exports; the dynamo exporter at opset 18 where
TorchScript cannot trace the model, as for GPT-2 with recent transformers), static shapes.

    python3 bench/export_full_models.py OUT [NAME ...]   (names: only those)
"""
import os
import sys

import numpy as np
import torch


def save(out, name, model, inputs, names):
    # Inference mode, wrapper included: the dynamo exporter keeps Dropout as the module's mode
    # says (a wrapper left in training mode exported GPT-2 with 25 random dropouts).
    model.eval()
    path = os.path.join(out, f"{name}.onnx")
    try:
        torch.onnx.export(model, tuple(inputs), path, input_names=names, output_names=["y"],
                          opset_version=17, dynamo=False)
    except Exception as e:  # newer transformers trace ops TorchScript cannot export (aten::diff)
        print(name, "TorchScript export failed, using the dynamo exporter:", type(e).__name__,
              flush=True)
        torch.onnx.export(model, tuple(inputs), path, input_names=names, output_names=["y"],
                          opset_version=18, dynamo=True, external_data=False)
    for n, x in zip(names, inputs):
        arr = x.numpy()
        dtype = {np.float32: "float32", np.int64: "int64"}[arr.dtype.type]
        arr.tofile(os.path.join(out, f"{name}.in.{n}.{dtype}.bin"))
    print(name, os.path.getsize(path) // 2**20, "MiB", flush=True)


def full_models():
    """(name, module, example inputs, input names) of each full-size model, weights seeded."""
    torch.manual_seed(0)
    import torchvision
    resnet = torchvision.models.resnet50()
    resnet.train()
    with torch.no_grad():
        for _ in range(4):
            resnet(torch.randn(8, 3, 224, 224))
    resnet.eval()
    models = [(f"resnet50_b{batch}", resnet, [torch.randn(batch, 3, 224, 224)], ["x"])
              for batch in (1, 8)]

    import transformers as tf

    bert = tf.BertModel(tf.BertConfig()).eval()
    ids = torch.randint(0, 30000, (1, 128))
    models.append(("bert_base", BertWrap(bert), [ids, torch.ones(1, 128, dtype=torch.int64)],
                   ["input_ids", "attention_mask"]))
    gpt2 = tf.GPT2LMHeadModel(tf.GPT2Config()).eval()
    gpt2.config.use_cache = False
    gpt2_ids = torch.randint(0, 50000, (1, 128))
    models.append(("gpt2_small", GptWrap(gpt2), [gpt2_ids], ["input_ids"]))
    # GPT2Model, the blocks without the logits' product (a third of the FLOPs above): the issue's
    # ONNX Runtime Web time for GPT-2 small (147 ms, below BERT-base's 199) fits this form.
    models.append(("gpt2_small_hidden", HiddenWrap(gpt2.transformer), [gpt2_ids], ["input_ids"]))
    vit = tf.ViTModel(tf.ViTConfig()).eval()
    models.append(("vit_b16", VitWrap(vit), [torch.randn(1, 3, 224, 224)], ["pixel_values"]))
    return models


def main(out, only):
    os.makedirs(out, exist_ok=True)
    for name, model, inputs, names in full_models():
        if not only or name in only:
            save(out, name, model, inputs, names)


class BertWrap(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids, mask):
        return self.m(input_ids=ids, attention_mask=mask).last_hidden_state


class GptWrap(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(input_ids=ids, use_cache=False).logits


class HiddenWrap(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(input_ids=ids, use_cache=False).last_hidden_state


class VitWrap(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(pixel_values=x).last_hidden_state


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

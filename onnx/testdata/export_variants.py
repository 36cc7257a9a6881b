# Runs on the GPU machine, beside export_zoo.py: some of its models as users also get them, each
# a way the zoo's exports (TorchScript, opset 17, data inline, fixed shapes) do not cover:
#   NAME_ext       the dynamo exporter as torch.onnx.export's defaults leave it: weights in
#                  NAME_ext.onnx.data beside the model (not inlined), its own opset (18+)
#   NAME_opN       TorchScript at opset N (11, 13, 15, 18, 20): ops whose attributes became inputs
#                  (Split, Squeeze, ReduceMean, Pad, Resize, ...) and back
#   NAME_batch     a symbolic batch axis (TorchScript dynamic_axes, inputs and output)
# usage: python3 export_variants.py OUT_DIR [PREFIX ...]; writes OUT_DIR/zoo-variants-PREFIX.json,
# which check_zoo.py reads as it reads the zoo's.
import json, os, sys, time, torch
from export_record import export_one
from export_zoo import ZOO

MODELS = ["tv_resnet18", "tv_mobilenet_v3_small", "timm_vit_tiny", "hf_bert", "hf_gpt2", "hf_t5_encoder"]
OPSETS = {"tv_resnet18": [11, 13, 15, 18, 20], "timm_vit_tiny": [11, 13, 15, 18, 20], "hf_bert": [11, 13, 15, 18, 20]}

if __name__ == "__main__":
    out = sys.argv[1]; os.makedirs(out, exist_ok=True)
    only = tuple(sys.argv[2:])
    report = {}
    for name in MODELS:
        if only and not name.startswith(only): continue
        torch.manual_seed(0); m, args, names = ZOO[name]()
        axes = {**{k: {0: "batch"} for k in names}, "y": {0: "batch"}}
        variants = [(f"{name}_ext", dict(dynamo=True, inline=False))]
        variants += [(f"{name}_op{o}", dict(dynamo=False, opset=o)) for o in OPSETS.get(name, [])]
        variants += [(f"{name}_batch", dict(dynamo=False, dynamic_axes=axes))]
        for tag, kw in variants:
            t = time.time()
            try:
                report[tag] = export_one(out, tag, m, args, names, **kw)
                print(tag, f"ok {time.time() - t:.1f}s", report[tag]["opset"], report[tag]["external"], flush=True)
            except Exception as e:
                print(tag, "export failed:", str(e)[:300], flush=True)
        json.dump(report, open(f"{out}/zoo-variants-{'-'.join(only) or 'all'}.json", "w"), indent=1)

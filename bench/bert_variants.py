"""Variants of an exported BERT-base (f32) for the GPU's diagnostics, written beside it:

- bert_fakeq.onnx: DynamicQuantizeLinear -> DequantizeLinear before each product by a 2-D weight
  (the quantizing kernels of a dynamically quantized model, with f32 products);
- bert_minmax.onnx: x -> Min(x, ReduceMax(x)) there (a reduction of the whole activation before
  each product, equal values out).

REPORT-quant.md (session 63) and REPORT-gpu.md (session 63) time them with bench/first_runs.ts.

    python3 bench/bert_variants.py MODELS/bert_base.onnx OUT_DIR
"""
import sys

import onnx
from onnx import helper


def variant(src, kind):
    m = onnx.load(src)
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    nodes, n = [], 0
    for node in g.node:
        weight = inits.get(node.input[1]) if node.op_type == "MatMul" else None
        if weight is not None and len(weight.dims) == 2:
            x = node.input[0]
            n += 1
            if kind == "fakeq":
                q, s, z, y = f"fq{n}_q", f"fq{n}_s", f"fq{n}_z", f"fq{n}_y"
                nodes.append(helper.make_node("DynamicQuantizeLinear", [x], [q, s, z]))
                nodes.append(helper.make_node("DequantizeLinear", [q, s, z], [y]))
            else:
                mx, y = f"mm{n}_max", f"mm{n}_y"
                nodes.append(helper.make_node("ReduceMax", [x], [mx], keepdims=1))
                nodes.append(helper.make_node("Min", [x, mx], [y]))
            node.input[0] = y
        nodes.append(node)
    del g.node[:]
    g.node.extend(nodes)
    return m, n


def main(src, out):
    for kind in ["fakeq", "minmax"]:
        m, n = variant(src, kind)
        onnx.save(m, f"{out}/bert_{kind}.onnx")
        print(kind, n, "products")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

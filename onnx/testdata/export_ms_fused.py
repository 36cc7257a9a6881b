# Runs on the GPU machine (onnx, onnxruntime): one-node models of ONNX Runtime's fused contrib ops
# (com.microsoft: Gelu, BiasGelu, FastGelu, QuickGelu, FusedMatMul, SkipLayerNormalization,
# SkipSimplifiedLayerNormalization; SimplifiedLayerNormalization in ONNX's domain), written as
# ONNX's node cases are (model.onnx, test_data_set_0/input_N.pb and output_N.pb), the expected
# outputs ONNX Runtime 1.30's CPU provider's. usage: python3 export_ms_fused.py OUT_DIR
import os, sys, shutil, numpy as np, onnx, onnxruntime as ort
from onnx import helper, numpy_helper, TensorProto

out = sys.argv[1]
rng = np.random.default_rng(0)
f = lambda *s: rng.standard_normal(s).astype(np.float32)


def case(name, op, inputs, outputs, domain="com.microsoft", **attrs):
    """One node `op` over named inputs (arrays; None leaves an optional input out)."""
    names = [k if v is not None else "" for k, v in inputs]
    node = helper.make_node(op, names, [o or "" for o in outputs], domain=domain, **attrs)
    given = [(k, v) for k, v in inputs if v is not None]
    graph = helper.make_graph(
        [node], name, [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in given],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o])
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets, ir_version=8)
    try:
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        ys = sess.run(None, {k: v for k, v in given})
    except Exception as e:
        print(name, "ORT failed:", str(e).splitlines()[0][:200]); return
    d = os.path.join(out, name); shutil.rmtree(d, ignore_errors=True); os.makedirs(f"{d}/test_data_set_0")
    onnx.save(model, f"{d}/model.onnx")
    for i, (k, v) in enumerate(given):
        onnx.save_tensor(numpy_helper.from_array(v, k), f"{d}/test_data_set_0/input_{i}.pb")
    for i, (o, y) in enumerate(zip([o for o in outputs if o], ys)):
        onnx.save_tensor(numpy_helper.from_array(y, o), f"{d}/test_data_set_0/output_{i}.pb")
    print(name, "ok", [y.shape for y in ys])


x, b = f(2, 3, 8), f(8)
case("ms_gelu", "Gelu", [("x", x)], ["y"])
case("ms_bias_gelu", "BiasGelu", [("x", x), ("b", b)], ["y"])
case("ms_fast_gelu", "FastGelu", [("x", 3 * x), ("b", b)], ["y"])
case("ms_fast_gelu_no_bias", "FastGelu", [("x", 3 * x)], ["y"])
case("ms_quick_gelu", "QuickGelu", [("x", x)], ["y"], alpha=1.5)
case("ms_fused_matmul_trans_b", "FusedMatMul", [("a", f(2, 4, 3)), ("b", f(2, 5, 3))], ["y"], transB=1, alpha=0.5)
case("ms_fused_matmul_trans_a", "FusedMatMul", [("a", f(3, 4)), ("b", f(3, 6))], ["y"], transA=1)
g, be, bi, skip = f(8), f(8), f(8), f(2, 3, 8)
case("ms_skip_layer_norm", "SkipLayerNormalization", [("x", x), ("skip", skip), ("gamma", g), ("beta", be), ("bias", bi)],
     ["y", "mean", "inv_std", "sum"], epsilon=1e-4)
case("ms_skip_layer_norm_plain", "SkipLayerNormalization", [("x", x), ("skip", skip), ("gamma", g)], ["y"])
case("ms_skip_simplified_layer_norm", "SkipSimplifiedLayerNormalization",
     [("x", x), ("skip", skip), ("gamma", g), ("bias", bi)], ["y", "", "inv_std", "sum"], epsilon=1e-5)
case("ms_simplified_layer_norm", "SimplifiedLayerNormalization", [("x", x), ("scale", g)], ["y", "inv_std"],
     domain="", axis=-1, epsilon=1e-5)

# Recurrent nodes in the forms ONNX's own conformance cases leave out (they are all forward):
# both directions, sequence_lens, initial states, peepholes, clip, input_forget, GRU both with
# and without linear_before_reset, activations that differ between the directions (layout 1 is
# theirs: ONNX Runtime's CPU kernels refuse it). Each model's output
# y is [Y, Y_h (, Y_c)] flattened and concatenated, recorded with ONNX Runtime's CPU provider.
# Run on the GPU machine (onnx, onnxruntime):  python3 export_rnn.py OUT_DIR
import json, sys
import numpy as np, onnx, onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1] if len(sys.argv) > 1 else "."
rng = np.random.default_rng(7)
S, B, I, H = 5, 3, 4, 6


def model(name, op, gates, attrs, layout=0, lens=None, peep=False, init=True):
    D = 2 if attrs.get("direction") == "bidirectional" else 1
    f = lambda *shape: (rng.standard_normal(shape) * 0.6).astype(np.float32)
    x_shape = [B, S, I] if layout else [S, B, I]
    state = lambda: f(B, D, H) if layout else f(D, B, H)
    inits = [numpy_helper.from_array(f(D, gates * H, I), "W"), numpy_helper.from_array(f(D, gates * H, H), "R"),
             numpy_helper.from_array(f(D, 2 * gates * H), "B")]
    names = ["x", "W", "R", "B"]
    if lens is not None:
        inits.append(numpy_helper.from_array(np.array(lens, np.int32), "lens"))
    names.append("lens" if lens is not None else "")
    if init:
        inits.append(numpy_helper.from_array(state(), "h0"))
    names.append("h0" if init else "")
    if op == "LSTM":
        if init:
            inits.append(numpy_helper.from_array(state(), "c0"))
        names.append("c0" if init else "")
        if peep:
            inits.append(numpy_helper.from_array(f(D, 3 * H), "P"))
            names.append("P")
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    nodes = [helper.make_node(op, names, outs, hidden_size=H, layout=layout, **attrs)]
    flat = []
    for o in outs:
        nodes.append(helper.make_node("Reshape", [o, "flat"], [o + "_flat"]))
        flat.append(o + "_flat")
    nodes.append(helper.make_node("Concat", flat, ["y"], axis=0))
    inits.append(numpy_helper.from_array(np.array([-1], np.int64), "flat"))
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, f"{out}/{name}.onnx")
    x = f(*x_shape)
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    x.tofile(f"{out}/{name}.in.x.float32.bin")
    y.astype(np.float32).tofile(f"{out}/{name}.out.y.float32.bin")
    print(name, y.shape)
    return name, {"inputs": {"x": [x_shape, "float32"]}, "output": [list(y.shape), "float32"], "ops": [op], "opset": [14]}


entries = dict([
    model("rnn_gru_bidir_lens", "GRU", 3, {"direction": "bidirectional"}, lens=[5, 3, 1]),
    model("rnn_gru_bidir_reset_after", "GRU", 3, {"direction": "bidirectional", "linear_before_reset": 1}),
    model("rnn_lstm_bidir_peep_clip", "LSTM", 4, {"direction": "bidirectional", "clip": 1.5}, lens=[2, 5, 4], peep=True),
    model("rnn_lstm_bidir_acts", "LSTM", 4, {
        "direction": "bidirectional",
        "activations": ["Sigmoid", "Tanh", "Tanh", "HardSigmoid", "Softsign", "Relu"],
        "activation_alpha": [0.3], "activation_beta": [0.4]}, init=False),
    model("rnn_rnn_bidir_acts", "RNN", 1, {"direction": "bidirectional", "activations": ["Relu", "Tanh"]}, lens=[4, 5, 2]),
    model("rnn_lstm_reverse", "LSTM", 4, {"direction": "reverse", "input_forget": 1}, peep=True),
])
path = f"{out}/models.json"
try:
    meta = json.load(open(path))
except FileNotFoundError:
    meta = {}
meta.update(entries)
json.dump(meta, open(path, "w"), indent=2)

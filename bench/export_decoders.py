"""Small decoders with a KV cache, in the layouts people export, and ONNX Runtime's greedy
continuation of a prompt for each (kiln's `generate` must give the same ids).

Run on the GPU machine (torch, onnx, onnxruntime): python bench/export_decoders.py OUT_DIR [--qwen]

- genai_tiny: onnxruntime-genai's layout built with onnx.helper (input_ids, attention_mask,
  past_key_values.N.key/value in; logits, present.N.key/value out; GroupQueryAttention with
  rotary caches, SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization, SiLU MLP),
  its MatMuls then quantized to 4-bit MatMulNBits (block 32) by ONNX Runtime's own quantizer.
- torch_tiny: a plain PyTorch decoder whose attention appends to a past and reads an
  attention_mask and position_ids, exported by torch.onnx.export with dynamic axes.
- --qwen: the same genai layout at Qwen2.5-0.5B's shape (24 layers, hidden 896, 14/2 heads,
  vocab 151936), random weights, for bench/generate.ts (large: not committed).
- --tiny-level4: genai_tiny quantized with accuracy_level 4 as genai_tiny_level4.onnx, its greedy
  continuation printed as a decoders.json entry.
- --qwen-level4: the Qwen2.5-0.5B-shaped decoder as qwen_shaped_level4.onnx, quantized with accuracy_level 4 (A rounded to
  8 bits a block: onnxruntime-genai's default for its CPU and WebGPU models).
- --ort-bench MODEL [--threads N]: ONNX Runtime's own CPU loop over MODEL (16 threads unless told).
- --symmetric (with --qwen-level4): the weights quantized symmetric, without zero points, as the model
  builder does by default (`int4_is_symmetric`), as qwen_shaped_level4_sym.onnx.
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1] if len(sys.argv) > 1 else "."
os.makedirs(OUT, exist_ok=True)


def genai_decoder(name, layers, hidden, heads, kv_heads, inter, vocab, max_pos, seed, level=None, symmetric=False):
    rng = np.random.default_rng(seed)
    head = hidden // heads
    inits, nodes = [], []

    def w(n, shape, scale=None):
        scale = scale or 1.0 / np.sqrt(shape[0])
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), n))
        return n

    def node(op, ins, outs, domain="", **attrs):
        nodes.append(helper.make_node(op, ins, outs, name=f"{outs[0]}_node", domain=domain, **attrs))
        return outs[0]

    # Rotary caches as genai writes them: [max_pos, head / 2].
    inv = 1.0 / (10000 ** (np.arange(0, head, 2) / head))
    freqs = np.outer(np.arange(max_pos), inv)
    inits.append(numpy_helper.from_array(np.cos(freqs).astype(np.float32), "cos_cache"))
    inits.append(numpy_helper.from_array(np.sin(freqs).astype(np.float32), "sin_cache"))
    x = node("Gather", [w("embed", [vocab, hidden], 1.0), "input_ids"], ["embedded"])
    # seqlens_k and total_sequence_length from the attention mask, as the builder does.
    inits.append(numpy_helper.from_array(np.array([1], np.int64), "one_axis"))
    inits.append(numpy_helper.from_array(np.array(1, np.int64), "one"))
    s = node("ReduceSum", ["attention_mask", "one_axis"], ["mask_sum"])
    s = node("Sub", [s, "one"], ["mask_sub"])
    node("Cast", [s], ["seqlens_k"], to=TensorProto.INT32)
    shape = node("Shape", ["attention_mask"], ["mask_shape"])
    total = node("Gather", [shape, "one"], ["mask_total"], axis=0)
    node("Cast", [total], ["total_seq_len"], to=TensorProto.INT32)
    skip = None
    for i in range(layers):
        g = w(f"l{i}.ln1", [hidden], 1.0)
        if skip is None:
            h = node("SimplifiedLayerNormalization", [x, g], [f"l{i}.ln1_out"], axis=-1, epsilon=1e-6)
            resid = x
        else:
            h, _, _, resid = (f"l{i}.ln1_out", None, None, f"l{i}.resid1")
            node("SkipSimplifiedLayerNormalization", [x, skip, g], [h, "", "", resid],
                 domain="com.microsoft", epsilon=1e-6)
        q = node("Add", [node("MatMul", [h, w(f"l{i}.q", [hidden, hidden])], [f"l{i}.q_mm"]),
                         w(f"l{i}.q_b", [hidden], 0.02)], [f"l{i}.q_out"])
        k = node("Add", [node("MatMul", [h, w(f"l{i}.k", [hidden, kv_heads * head])], [f"l{i}.k_mm"]),
                         w(f"l{i}.k_b", [kv_heads * head], 0.02)], [f"l{i}.k_out"])
        v = node("Add", [node("MatMul", [h, w(f"l{i}.v", [hidden, kv_heads * head])], [f"l{i}.v_mm"]),
                         w(f"l{i}.v_b", [kv_heads * head], 0.02)], [f"l{i}.v_out"])
        att = node("GroupQueryAttention",
                   [q, k, v, f"past_key_values.{i}.key", f"past_key_values.{i}.value",
                    "seqlens_k", "total_seq_len", "cos_cache", "sin_cache"],
                   [f"l{i}.attn", f"present.{i}.key", f"present.{i}.value"],
                   domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads, do_rotary=1,
                   scale=1.0 / np.sqrt(head))
        o = node("MatMul", [att, w(f"l{i}.o", [hidden, hidden])], [f"l{i}.o_out"])
        h2, resid2 = f"l{i}.ln2_out", f"l{i}.resid2"
        node("SkipSimplifiedLayerNormalization", [o, resid, w(f"l{i}.ln2", [hidden], 1.0)],
             [h2, "", "", resid2], domain="com.microsoft", epsilon=1e-6)
        gate = node("MatMul", [h2, w(f"l{i}.gate", [hidden, inter])], [f"l{i}.gate_out"])
        up = node("MatMul", [h2, w(f"l{i}.up", [hidden, inter])], [f"l{i}.up_out"])
        act = node("Mul", [gate, node("Sigmoid", [gate], [f"l{i}.sig"])], [f"l{i}.silu"])
        mlp = node("MatMul", [node("Mul", [act, up], [f"l{i}.gated"]), w(f"l{i}.down", [inter, hidden])],
                   [f"l{i}.down_out"])
        x, skip = mlp, resid2
    fin = "final_norm"
    node("SkipSimplifiedLayerNormalization", [x, skip, w("final_ln", [hidden], 1.0)],
         [fin, "", "", "final_resid"], domain="com.microsoft", epsilon=1e-6)
    node("MatMul", [fin, w("lm_head", [hidden, vocab])], ["logits"])
    kv = ["batch_size", kv_heads, "past_sequence_length", head]
    present = ["batch_size", kv_heads, "total_sequence_length", head]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch_size", "sequence_length", vocab])]
    for i in range(layers):
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_key_values.{i}.{kind}", TensorProto.FLOAT, kv))
            outputs.append(helper.make_tensor_value_info(f"present.{i}.{kind}", TensorProto.FLOAT, present))
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer
    quant = MatMulNBitsQuantizer(model, block_size=32, is_symmetric=symmetric, accuracy_level=level)
    quant.process()
    return quant.model.model


class TorchDecoder:
    """A plain PyTorch decoder: learned positions, pre-norm blocks, attention over past ++ new."""

    @staticmethod
    def build(layers=2, hidden=64, heads=4, vocab=128, max_pos=256):
        import torch
        from torch import nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
                self.qkv, self.out = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
                self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

            def forward(self, x, past_k, past_v, bias):
                b, s, _ = x.shape
                q, k, v = self.qkv(self.ln1(x)).split(hidden, dim=2)
                split = lambda t: t.view(b, s, heads, hidden // heads).transpose(1, 2)
                q, k, v = split(q), split(k), split(v)
                k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
                att = (q @ k.transpose(2, 3)) / (hidden // heads) ** 0.5 + bias
                y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, s, hidden)
                x = x + self.out(y)
                return x + self.mlp(self.ln2(x)), k, v

        class Decoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.tok, self.pos = nn.Embedding(vocab, hidden), nn.Embedding(max_pos, hidden)
                self.blocks = nn.ModuleList(Block() for _ in range(layers))
                self.ln, self.head = nn.LayerNorm(hidden), nn.Linear(hidden, vocab, bias=False)

            def forward(self, input_ids, attention_mask, position_ids, *past):
                s = input_ids.shape[1]
                t = attention_mask.shape[1]
                # Causal over the whole (past ++ new) axis, and the padding mask.
                qpos = torch.arange(s).view(s, 1) + (t - s)
                causal = torch.arange(t).view(1, t) <= qpos
                keep = causal.view(1, 1, s, t) & (attention_mask.view(-1, 1, 1, t) > 0)
                bias = torch.where(keep, 0.0, torch.finfo(torch.float32).min)
                x = self.tok(input_ids) + self.pos(position_ids)
                presents = []
                for i, blk in enumerate(self.blocks):
                    x, k, v = blk(x, past[2 * i], past[2 * i + 1], bias)
                    presents += [k, v]
                return (self.head(self.ln(x)), *presents)

        torch.manual_seed(7)
        return Decoder().eval(), layers, heads, hidden // heads


def export_torch(path):
    import torch
    model, layers, heads, head = TorchDecoder.build()
    b, s, p = 1, 5, 3
    past = [torch.randn(b, heads, p, head) for _ in range(2 * layers)]
    names = [f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    outs = ["logits"] + [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
           "position_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}
    for n in names:
        dyn[n] = {0: "batch", 2: "past"}
    for n in outs[1:]:
        dyn[n] = {0: "batch", 2: "total"}
    args = (torch.randint(0, 128, (b, s)), torch.ones(b, p + s, dtype=torch.int64),
            torch.arange(p, p + s).view(1, s), *past)
    torch.onnx.export(model, args, path, input_names=["input_ids", "attention_mask", "position_ids", *names],
                      output_names=outs, dynamic_axes=dyn, opset_version=17, dynamo=False)


def greedy(path, prompt, new, heads_of):
    """ONNX Runtime's greedy continuation with the cache fed back, as a generation loop does."""
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    pasts = [i for i in sess.get_inputs() if i.name.startswith("past_key_values")]
    feeds = {p.name: np.zeros((1, p.shape[1], 0, p.shape[3]), np.float32) for p in pasts}
    ids, out = list(prompt), []
    step = np.array([prompt], np.int64)
    for _ in range(new):
        total = len(ids)
        feeds["input_ids"] = step
        feeds["attention_mask"] = np.ones((1, total), np.int64)
        if "position_ids" in names:
            feeds["position_ids"] = np.arange(total - step.shape[1], total, dtype=np.int64).reshape(1, -1)
        res = sess.run(None, feeds)
        token = int(np.argmax(res[0][0, -1]))
        out.append(token)
        ids.append(token)
        for p, present in zip(pasts, res[1:]):
            feeds[p.name] = present
        step = np.array([[token]], np.int64)
    return out


def ort_bench(path, prompt_len=128, new=128, threads=16):
    """ONNX Runtime's CPU loop (past fed back, as onnxruntime-genai does without a shared buffer):
    prefill ms and decode tokens/s, and the packed bytes of the MatMulNBits weights."""
    import time
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    pasts = [i for i in sess.get_inputs() if i.name.startswith("past_key_values")]
    rng = np.random.default_rng(1)
    prompt = rng.integers(0, 1000, prompt_len).tolist()
    feeds = {p.name: np.zeros((1, p.shape[1], 0, p.shape[3]), np.float32) for p in pasts}
    ids, step, times = list(prompt), np.array([prompt], np.int64), []
    for _ in range(new):
        t = time.perf_counter()
        feeds["input_ids"] = step
        feeds["attention_mask"] = np.ones((1, len(ids)), np.int64)
        res = sess.run(None, feeds)
        token = int(np.argmax(res[0][0, -1]))
        times.append(time.perf_counter() - t)
        ids.append(token)
        for p, present in zip(pasts, res[1:]):
            feeds[p.name] = present
        step = np.array([[token]], np.int64)
    model = onnx.load(path, load_external_data=True)
    packed = sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer
                 if any(t.name in n.input[1:] for n in model.graph.node if n.op_type == "MatMulNBits"))
    return {"runner": "ort-cpu", "threads": threads, "prefill_ms": times[0] * 1000,
            "decode_tokens_per_s": (new - 1) / sum(times[1:]), "ids": ids[prompt_len:prompt_len + 8],
            "packed_weight_bytes": packed}


def main():
    if "--ort-bench" in sys.argv:
        threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 16
        print(json.dumps(ort_bench(sys.argv[sys.argv.index("--ort-bench") + 1], threads=threads)))
        return
    if "--tiny-level4" in sys.argv:
        tiny = genai_decoder("genai_tiny", 2, 64, 4, 2, 128, 128, 256, 11, level=4)
        onnx.save(tiny, f"{OUT}/genai_tiny_level4.onnx")
        prompt = [3, 17, 42, 9, 100, 5, 77]
        entry = {"prompt": prompt, "greedy": greedy(f"{OUT}/genai_tiny_level4.onnx", prompt, 24, None)}
        print(json.dumps({"genai_tiny_level4": entry}))
        return
    if "--qwen-level4" in sys.argv:
        symmetric = "--symmetric" in sys.argv
        name = "qwen_shaped_level4" + ("_sym" if symmetric else "")
        qwen = genai_decoder("qwen_shaped", 24, 896, 14, 2, 4864, 151936, 4096, 5, level=4,
                             symmetric=symmetric)
        onnx.save(qwen, f"{OUT}/{name}.onnx", save_as_external_data=True, location=f"{name}.onnx.data")
        return
    genai = genai_decoder("genai_tiny", 2, 64, 4, 2, 128, 128, 256, 11)
    onnx.save(genai, f"{OUT}/genai_tiny.onnx")
    export_torch(f"{OUT}/torch_tiny.onnx")
    cases = {}
    for name in ("genai_tiny", "torch_tiny"):
        prompt = [3, 17, 42, 9, 100, 5, 77]
        cases[name] = {"prompt": prompt, "greedy": greedy(f"{OUT}/{name}.onnx", prompt, 24, None)}
        print(name, cases[name], os.path.getsize(f"{OUT}/{name}.onnx"), flush=True)
    with open(f"{OUT}/decoders.json", "w") as f:
        json.dump(cases, f, indent=1)
    if "--qwen" in sys.argv:
        qwen = genai_decoder("qwen_shaped", 24, 896, 14, 2, 4864, 151936, 4096, 5)
        onnx.save(qwen, f"{OUT}/qwen_shaped.onnx", save_as_external_data=True, location="qwen_shaped.onnx.data")


if __name__ == "__main__":
    main()

/**
 * A ViT-B/16-shaped encoder as `torch.onnx.export` (TorchScript, opset 17) writes Hugging Face's
 * `ViTModel` with eager attention: 16×16 patches by a strided Conv, the class token concatenated
 * and position embeddings added, per layer LayerNormalization before attention and before the
 * MLP (Erf GELU), QKᵀ/8, Softmax, ·V, residuals, and the last LayerNormalization — random
 * weights, for CPU timings on a machine without PyTorch (the GPU machine exports the real one:
 * `bench/export_full_models.py`).
 *
 *   deno run -A bench/vit_shaped.ts OUT.onnx [--layers 12]
 *
 * Writes OUT.onnx and beside it its input (`OUT.in.pixel_values.float32.bin`, 1×3×224×224).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { int, ints, OnnxWriter } from "./onnx_writer.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: { layers: { type: "string", default: "12" } },
  allowPositionals: true,
});
const out = positionals[0];
if (!out) throw new Error("usage: bench/vit_shaped.ts OUT.onnx [--layers 12]");
const [layers, hidden, heads, inter, patch, side] = [Number(values.layers), 768, 12, 3072, 16, 224];
const seq = (side / patch) ** 2 + 1, head = hidden / heads;
const w = new OnnxWriter(13);
const node = w.node.bind(w);
const norm = (x: string, name: string) => w.layerNorm(x, name, hidden, 1e-12);
const split = (x: string, name: string, keys: boolean) =>
  w.heads(x, name, [seq, heads, head], keys);

/** x · W + b for a [k, n] weight. */
function linear(x: string, name: string, k: number, n: number): string {
  const y = node("MatMul", [x, w.weight(`${name}.weight`, [k, n], 0.02)], `${name}.mm`);
  return node("Add", [y, w.weight(`${name}.bias`, [n], 0.02)], `${name}.out`);
}

/** Layer `i` over `h`: its output. */
function layer(i: number, h: string): string {
  const p = `l${i}`;
  const x = norm(h, `${p}.ln1`);
  const q = split(linear(x, `${p}.q`, hidden, hidden), `${p}.q`, false);
  const k = split(linear(x, `${p}.k`, hidden, hidden), `${p}.k`, true);
  const v = split(linear(x, `${p}.v`, hidden, hidden), `${p}.v`, false);
  const qk = node("MatMul", [q, k], `${p}.qk`);
  const scores = node("Div", [qk, w.weight(`${p}.sqrt`, [], 0, 8)], `${p}.scaled`);
  const probs = node("Softmax", [scores], `${p}.probs`, [int("axis", -1)]);
  const ctx = node("Transpose", [node("MatMul", [probs, v], `${p}.ctx`)], `${p}.ctx.t`, [
    ints("perm", [0, 2, 1, 3]),
  ]);
  const flatShape = w.int64(`${p}.flat`, [3], [1, seq, hidden]);
  const flat = node("Reshape", [ctx, flatShape], `${p}.ctx.flat`);
  const a = node("Add", [linear(flat, `${p}.o`, hidden, hidden), h], `${p}.res1`);
  const f = linear(norm(a, `${p}.ln2`), `${p}.ff1`, hidden, inter);
  const erf = node(
    "Erf",
    [node("Div", [f, w.weight(`${p}.rt2`, [], 0, Math.SQRT2)], `${p}.d`)],
    `${p}.erf`,
  );
  const half = node("Mul", [f, w.weight(`${p}.half`, [], 0, 0.5)], `${p}.fh`);
  const gelu = node(
    "Mul",
    [half, node("Add", [erf, w.weight(`${p}.one`, [], 0, 1)], `${p}.e1`)],
    `${p}.gelu`,
  );
  return node("Add", [linear(gelu, `${p}.ff2`, inter, hidden), a], `${p}.res2`);
}

// Patches: a 16×16 stride-16 Conv, flattened to [1, 196, 768] behind the class token.
const conv = node(
  "Conv",
  [
    "pixel_values",
    w.weight("patch.weight", [hidden, 3, patch, patch], 0.02),
    w.weight("patch.bias", [hidden], 0.02),
  ],
  "patches",
  [
    ints("kernel_shape", [patch, patch]),
    ints("strides", [patch, patch]),
  ],
);
const flatPatches = node(
  "Reshape",
  [conv, w.int64("patch.flat", [3], [1, hidden, seq - 1])],
  "patch.flat3",
);
const tokens = node("Transpose", [flatPatches], "patch.tokens", [ints("perm", [0, 2, 1])]);
const withCls = node("Concat", [w.weight("cls", [1, 1, hidden], 0.02), tokens], "tokens", [
  int("axis", 1),
]);
let h = node("Add", [withCls, w.weight("pos", [1, seq, hidden], 0.02)], "emb");
for (let i = 0; i < layers; i++) h = layer(i, h);
node("Identity", [norm(h, "ln_f")], "y");
const pixels = Float32Array.from({ length: 3 * side * side }, () => w.random() * 2 - 1);
w.write(out, [["pixel_values", "float32", [1, 3, side, side], pixels]], [["y", [1, seq, hidden]]]);
console.log(`${out}: ${layers} layers, ${seq} tokens`);

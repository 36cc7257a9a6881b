/**
 * A GPT-2-small-shaped decoder as `torch.onnx.export` (TorchScript, opset 17) writes Hugging
 * Face's `GPT2LMHeadModel` with eager attention and no cache: token and position embeddings, per
 * layer LayerNormalization, the Conv1D projections as Gemm over the flattened rows, heads split by
 * Reshape/Transpose, QKᵀ/8 under the causal mask (Where, finfo(f32).min), Softmax, ·V, the tanh
 * form of GELU, and the logits through the tied embedding — random weights, for CPU timings on a
 * machine without PyTorch (the GPU machine exports the real one: `bench/export_full_models.py`).
 * `--no-head`: `GPT2Model`'s last hidden state instead of the logits (the blocks alone).
 *
 *   deno run -A bench/gpt2_shaped.ts OUT.onnx [--layers 12] [--seq 128] [--vocab 50257] [--no-head]
 *
 * Writes OUT.onnx and beside it its input (`OUT.in.input_ids.int64.bin`).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { int, ints, OnnxWriter } from "./onnx_writer.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: {
    layers: { type: "string", default: "12" },
    seq: { type: "string", default: "128" },
    vocab: { type: "string", default: "50257" },
    "no-head": { type: "boolean", default: false },
  },
  allowPositionals: true,
});
const out = positionals[0];
if (!out) {
  throw new Error(
    "usage: bench/gpt2_shaped.ts OUT.onnx [--layers 12] [--seq 128] [--vocab 50257] [--no-head]",
  );
}
const [layers, seq, hidden, heads, vocab] = [
  Number(values.layers),
  Number(values.seq),
  768,
  12,
  Number(values.vocab),
];
const head = hidden / heads;
const w = new OnnxWriter(11);
const node = w.node.bind(w);
const rows = w.int64("rows", [2], [seq, hidden]);

/** Conv1D: [1, seq, k] → Gemm over the rows with a [k, n] weight → [1, seq, n]. */
function conv1d(x: string, name: string, k: number, n: number): string {
  const flat = node(
    "Reshape",
    [x, k === hidden ? rows : w.int64(`${name}.rows`, [2], [seq, k])],
    `${name}.flat`,
  );
  const y = node("Gemm", [
    flat,
    w.weight(`${name}.weight`, [k, n], 0.02),
    w.weight(`${name}.bias`, [n], 0.02),
  ], `${name}.gemm`);
  return node("Reshape", [y, w.int64(`${name}.back`, [3], [1, seq, n])], `${name}.out`);
}

/** LayerNormalization over the hidden axis. */
const norm = (x: string, name: string) => w.layerNorm(x, name, hidden, 1e-5);

/** [1, seq, hidden] split into heads (see `OnnxWriter.heads`). */
const split = (x: string, name: string, keys: boolean) =>
  w.heads(x, name, [seq, heads, head], keys);

/** 0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³))). */
function gelu(x: string, p: string): string {
  const cube = node("Pow", [x, w.weight(`${p}.three`, [], 0, 3)], `${p}.cube`);
  const inner = node("Add", [
    x,
    node("Mul", [cube, w.weight(`${p}.c`, [], 0, 0.044715)], `${p}.cc`),
  ], `${p}.inner`);
  const t = node("Tanh", [
    node("Mul", [inner, w.weight(`${p}.k`, [], 0, Math.sqrt(2 / Math.PI))], `${p}.ki`),
  ], `${p}.tanh`);
  const onePlus = node("Add", [t, w.weight(`${p}.one`, [], 0, 1)], `${p}.op`);
  return node(
    "Mul",
    [node("Mul", [x, w.weight(`${p}.half`, [], 0, 0.5)], `${p}.hx`), onePlus],
    `${p}.gelu`,
  );
}

/** Layer `i` over `h`: its output. */
function layer(i: number, h: string, causal: string, min: string): string {
  const p = `l${i}`;
  const qkv = conv1d(norm(h, `${p}.ln1`), `${p}.attn`, hidden, 3 * hidden);
  const sizes = w.int64(`${p}.sizes`, [3], [hidden, hidden, hidden]);
  const parts = w.nodes("Split", [qkv, sizes], [0, 1, 2].map((j) => `${p}.qkv${j}`), [
    int("axis", 2),
  ]);
  const q = split(parts[0], `${p}.q`, false), k = split(parts[1], `${p}.k`, true);
  const v = split(parts[2], `${p}.v`, false);
  const qk = node(
    "Div",
    [node("MatMul", [q, k], `${p}.qk`), w.weight(`${p}.sqrt`, [], 0, 8)],
    `${p}.scaled`,
  );
  const masked = node("Where", [causal, qk, min], `${p}.masked`);
  const probs = node("Softmax", [masked], `${p}.probs`, [int("axis", -1)]);
  const ctx = node("Transpose", [node("MatMul", [probs, v], `${p}.ctx`)], `${p}.ctx.t`, [
    ints("perm", [0, 2, 1, 3]),
  ]);
  const merged = node(
    "Reshape",
    [ctx, w.int64(`${p}.merge`, [3], [1, seq, hidden])],
    `${p}.merged`,
  );
  const a = node("Add", [conv1d(merged, `${p}.proj`, hidden, hidden), h], `${p}.res1`);
  const f = gelu(conv1d(norm(a, `${p}.ln2`), `${p}.fc`, hidden, 4 * hidden), p);
  return node("Add", [conv1d(f, `${p}.mlp`, 4 * hidden, hidden), a], `${p}.res2`);
}

const wte = w.weight("wte", [vocab, hidden], 0.02);
const positions = w.int64("position_ids", [1, seq], [...Array(seq).keys()]);
let h = node("Add", [
  node("Gather", [wte, "input_ids"], "tok"),
  node("Gather", [w.weight("wpe", [1024, hidden], 0.01), positions], "pos"),
], "emb");
// The causal mask as a bool constant (the bias buffer, sliced at export), the fill finfo.min.
const causal = new Float32Array(seq * seq).map((_, i) => (i % seq <= Math.floor(i / seq) ? 1 : 0));
const maskF = w.data("causal.f", [1, 1, seq, seq], causal);
const causalBool = node("Cast", [maskF], "causal", [int("to", 9)]);
const min = w.weight("finfo.min", [], 0, -3.4028234663852886e38);
for (let i = 0; i < layers; i++) h = layer(i, h, causalBool, min);
const last = norm(h, "ln_f");
const lmHead = !values["no-head"];
if (lmHead) {
  node("MatMul", [last, node("Transpose", [wte], "wte.t", [ints("perm", [1, 0])])], "logits");
}
const ids = BigInt64Array.from({ length: seq }, () => BigInt(Math.floor(w.random() * vocab)));
const output = lmHead ? "logits" : last;
w.write(out, [["input_ids", "int64", [1, seq], ids]], [[output, [
  1,
  seq,
  lmHead ? vocab : hidden,
]]]);
console.log(`${out}: ${layers} layers, sequence ${seq}`);

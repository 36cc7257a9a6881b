/**
 * A BERT-base-shaped encoder as `torch.onnx.export` (TorchScript, opset 17) writes Hugging Face's
 * `BertModel` with eager attention: embeddings summed and normalized, per layer Q/K/V MatMul+Add,
 * heads split by Reshape/Transpose, QKᵀ/8 plus the additive mask, Softmax, ·V, the output
 * projection and LayerNormalization, the Erf form of GELU — random weights, for CPU timings on a
 * machine without PyTorch (the GPU machine exports the real one: `bench/export_full_models.py`).
 *
 *   deno run -A bench/bert_shaped.ts OUT.onnx [--layers 12] [--seq 128]
 *
 * Writes OUT.onnx and beside it the inputs (`OUT.in.input_ids.int64.bin`,
 * `OUT.in.attention_mask.int64.bin`), as `bench/export_full_models.py` does.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { int, ints, OnnxWriter } from "./onnx_writer.ts";

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: { layers: { type: "string", default: "12" }, seq: { type: "string", default: "128" } },
  allowPositionals: true,
});
const out = positionals[0];
if (!out) throw new Error("usage: bench/bert_shaped.ts OUT.onnx [--layers 12] [--seq 128]");
const [layers, seq, hidden, heads, inter, vocab] = [
  Number(values.layers),
  Number(values.seq),
  768,
  12,
  3072,
  30522,
];
const head = hidden / heads;
const w = new OnnxWriter(7);
const node = w.node.bind(w);

/** x · W + b for a [k, n] weight. */
function linear(x: string, name: string, k: number, n: number): string {
  const y = node("MatMul", [x, w.weight(`${name}.weight`, [k, n], 0.02)], `${name}.mm`);
  return node("Add", [y, w.weight(`${name}.bias`, [n], 0.02)], `${name}.out`);
}

/** LayerNormalization over the hidden axis. */
const norm = (x: string, name: string) => w.layerNorm(x, name, hidden, 1e-12);

/** [1, seq, hidden] split into heads (see `OnnxWriter.heads`). */
const split = (x: string, name: string, keys: boolean) =>
  w.heads(x, name, [seq, heads, head], keys);

/** Layer `i` over `h`: its output. */
function layer(i: number, h: string, mask: string): string {
  const p = `l${i}`;
  const q = split(linear(h, `${p}.q`, hidden, hidden), `${p}.q`, false);
  const k = split(linear(h, `${p}.k`, hidden, hidden), `${p}.k`, true);
  const v = split(linear(h, `${p}.v`, hidden, hidden), `${p}.v`, false);
  const qk = node("MatMul", [q, k], `${p}.qk`);
  const scores = node("Div", [qk, w.weight(`${p}.sqrt`, [], 0, 8)], `${p}.scaled`);
  const probs = node("Softmax", [node("Add", [scores, mask], `${p}.masked`)], `${p}.probs`, [
    int("axis", -1),
  ]);
  const ctx = node("Transpose", [node("MatMul", [probs, v], `${p}.ctx`)], `${p}.ctx.t`, [
    ints("perm", [0, 2, 1, 3]),
  ]);
  const flatShape = w.int64(`${p}.flat`, [3], [1, seq, hidden]);
  const flat = node("Reshape", [ctx, flatShape], `${p}.ctx.flat`);
  const res1 = node("Add", [linear(flat, `${p}.o`, hidden, hidden), h], `${p}.res1`);
  const a = norm(res1, `${p}.ln1`);
  const f = linear(a, `${p}.ff1`, hidden, inter);
  const scaled = node("Div", [f, w.weight(`${p}.rt2`, [], 0, Math.SQRT2)], `${p}.d`);
  const erf = node("Erf", [scaled], `${p}.erf`);
  const half = node("Mul", [f, w.weight(`${p}.half`, [], 0, 0.5)], `${p}.fh`);
  const gelu = node(
    "Mul",
    [half, node("Add", [erf, w.weight(`${p}.one`, [], 0, 1)], `${p}.e1`)],
    `${p}.gelu`,
  );
  return norm(node("Add", [linear(gelu, `${p}.ff2`, inter, hidden), a], `${p}.res2`), `${p}.ln2`);
}

const positions = w.int64("position_ids", [1, seq], [...Array(seq).keys()]);
const types = w.int64("token_type_ids", [1, seq], new Array(seq).fill(0));
const words = node("Gather", [w.weight("word", [vocab, hidden], 0.02), "input_ids"], "emb.words");
const typed = node("Gather", [w.weight("type", [2, hidden], 0.02), types], "emb.types");
const placed = node("Gather", [w.weight("pos", [512, hidden], 0.02), positions], "emb.pos");
let h = norm(node("Add", [node("Add", [words, typed], "emb.wt"), placed], "emb.sum"), "emb.ln");
// (1 − mask[:, None, None, :]) · finfo(f32).min, as BERT's extended attention mask.
const unsq = node("Unsqueeze", ["attention_mask", w.int64("mask.axes", [2], [1, 2])], "mask.4d");
const asFloat = node("Cast", [unsq], "mask.f", [int("to", 1)]);
const inverted = node("Sub", [w.weight("mask.one", [], 0, 1), asFloat], "mask.inv");
const mask = node(
  "Mul",
  [inverted, w.weight("mask.min", [], 0, -3.4028234663852886e38)],
  "mask.add",
);
for (let i = 0; i < layers; i++) h = layer(i, h, mask);
node("Identity", [h], "y");
const ids = BigInt64Array.from({ length: seq }, () => BigInt(Math.floor(w.random() * vocab)));
w.write(out, [
  ["input_ids", "int64", [1, seq], ids],
  ["attention_mask", "int64", [1, seq], new BigInt64Array(seq).fill(1n)],
], [["y", [1, seq, hidden]]]);
console.log(`${out}: ${layers} layers, sequence ${seq}`);

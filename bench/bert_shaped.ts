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
import {
  type AttributeProto,
  encodeModel,
  type NodeProto,
  type TensorProto,
  type ValueInfoProto,
} from "../onnx/wire/proto.ts";

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

let seed = 7;
/** A fixed pseudo-random stream in [0, 1). */
const random = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x80000000);
const ints = (name: string, v: number[]): AttributeProto => ({ name, type: 7, ints: v });
const int = (name: string, i: number): AttributeProto => ({ name, type: 2, i });
const float = (name: string, f: number): AttributeProto => ({ name, type: 1, f });
const inits: TensorProto[] = [];
const nodes: NodeProto[] = [];

/** An f32 initializer of `shape`: uniform in ±`scale`, or all `fill`. */
function weight(name: string, shape: number[], scale: number, fill?: number): string {
  const data = Float32Array.from(
    { length: shape.reduce((p, d) => p * d, 1) },
    () => fill ?? (random() * 2 - 1) * scale,
  );
  inits.push({ name, dims: shape, dataType: 1, rawData: new Uint8Array(data.buffer) });
  return name;
}

/** An int64 initializer. */
function int64(name: string, shape: number[], data: number[]): string {
  const raw = BigInt64Array.from(data, BigInt);
  inits.push({ name, dims: shape, dataType: 7, rawData: new Uint8Array(raw.buffer) });
  return name;
}

/** A node; its output's name. */
function node(op: string, input: string[], output: string, attrs: AttributeProto[] = []): string {
  nodes.push({ opType: op, domain: "", input, output: [output], attribute: attrs, name: output });
  return output;
}

/** x · W + b for a [k, n] weight. */
function linear(x: string, name: string, k: number, n: number): string {
  const y = node("MatMul", [x, weight(`${name}.weight`, [k, n], 0.02)], `${name}.mm`);
  return node("Add", [y, weight(`${name}.bias`, [n], 0.02)], `${name}.out`);
}

/** LayerNormalization over the hidden axis. */
function norm(x: string, name: string): string {
  const g = weight(`${name}.weight`, [hidden], 0, 1), b = weight(`${name}.bias`, [hidden], 0, 0);
  return node("LayerNormalization", [x, g, b], `${name}.out`, [
    int("axis", -1),
    float("epsilon", 1e-12),
  ]);
}

/** [1, seq, hidden] → [1, heads, seq, head] (or [1, heads, head, seq] for the keys). */
function split(x: string, name: string, keys: boolean): string {
  const shape = int64(`${name}.shape`, [4], [1, seq, heads, head]);
  const r = node("Reshape", [x, shape], `${name}.heads`);
  return node("Transpose", [r], `${name}.t`, [ints("perm", keys ? [0, 2, 3, 1] : [0, 2, 1, 3])]);
}

/** Layer `i` over `h`: its output. */
function layer(i: number, h: string, mask: string): string {
  const p = `l${i}`;
  const q = split(linear(h, `${p}.q`, hidden, hidden), `${p}.q`, false);
  const k = split(linear(h, `${p}.k`, hidden, hidden), `${p}.k`, true);
  const v = split(linear(h, `${p}.v`, hidden, hidden), `${p}.v`, false);
  const scores = node(
    "Div",
    [node("MatMul", [q, k], `${p}.qk`), weight(`${p}.sqrt`, [], 0, 8)],
    `${p}.scaled`,
  );
  const probs = node("Softmax", [node("Add", [scores, mask], `${p}.masked`)], `${p}.probs`, [
    int("axis", -1),
  ]);
  const ctx = node("Transpose", [node("MatMul", [probs, v], `${p}.ctx`)], `${p}.ctx.t`, [
    ints("perm", [0, 2, 1, 3]),
  ]);
  const flat = node("Reshape", [ctx, int64(`${p}.flat`, [3], [1, seq, hidden])], `${p}.ctx.flat`);
  const a = norm(node("Add", [linear(flat, `${p}.o`, hidden, hidden), h], `${p}.res1`), `${p}.ln1`);
  const f = linear(a, `${p}.ff1`, hidden, inter);
  const erf = node(
    "Erf",
    [node("Div", [f, weight(`${p}.rt2`, [], 0, Math.SQRT2)], `${p}.d`)],
    `${p}.erf`,
  );
  const gelu = node(
    "Mul",
    [
      node("Mul", [f, weight(`${p}.half`, [], 0, 0.5)], `${p}.fh`),
      node("Add", [erf, weight(`${p}.one`, [], 0, 1)], `${p}.e1`),
    ],
    `${p}.gelu`,
  );
  return norm(node("Add", [linear(gelu, `${p}.ff2`, inter, hidden), a], `${p}.res2`), `${p}.ln2`);
}

const positions = int64("position_ids", [1, seq], [...Array(seq).keys()]);
const types = int64("token_type_ids", [1, seq], new Array(seq).fill(0));
const words = node("Gather", [weight("word", [vocab, hidden], 0.02), "input_ids"], "emb.words");
const typed = node("Gather", [weight("type", [2, hidden], 0.02), types], "emb.types");
const placed = node("Gather", [weight("pos", [512, hidden], 0.02), positions], "emb.pos");
let h = norm(node("Add", [node("Add", [words, typed], "emb.wt"), placed], "emb.sum"), "emb.ln");
// (1 − mask[:, None, None, :]) · finfo(f32).min, as BERT's extended attention mask.
const unsq = node("Unsqueeze", ["attention_mask", int64("mask.axes", [2], [1, 2])], "mask.4d");
const asFloat = node("Cast", [unsq], "mask.f", [int("to", 1)]);
const inverted = node("Sub", [weight("mask.one", [], 0, 1), asFloat], "mask.inv");
const mask = node("Mul", [inverted, weight("mask.min", [], 0, -3.4028234663852886e38)], "mask.add");
for (let i = 0; i < layers; i++) h = layer(i, h, mask);
node("Identity", [h], "y");

const tensor = (name: string, elemType: number, dims: number[]): ValueInfoProto => ({
  name,
  type: { tensorType: { elemType, shape: { dim: dims.map((d) => ({ dimValue: d })) } } },
});
Deno.writeFileSync(
  out,
  encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "bert_shaped",
      node: nodes,
      initializer: inits,
      input: [tensor("input_ids", 7, [1, seq]), tensor("attention_mask", 7, [1, seq])],
      output: [tensor("y", 1, [1, seq, hidden])],
    },
  }),
);
const base = out.replace(/\.onnx$/, "");
const ids = BigInt64Array.from({ length: seq }, () => BigInt(Math.floor(random() * vocab)));
Deno.writeFileSync(`${base}.in.input_ids.int64.bin`, new Uint8Array(ids.buffer));
const ones = new BigInt64Array(seq).fill(1n);
Deno.writeFileSync(`${base}.in.attention_mask.int64.bin`, new Uint8Array(ones.buffer));
console.log(`${out}: ${layers} layers, sequence ${seq}, ${inits.length} initializers`);

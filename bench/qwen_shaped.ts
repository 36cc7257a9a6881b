/**
 * The Qwen2.5-0.5B-shaped 4-bit decoder of `bench/export_decoders.py --qwen` (onnxruntime-genai's
 * layout: GroupQueryAttention with rotary caches, Skip/SimplifiedLayerNormalization, SiLU MLP,
 * MatMulNBits in blocks of 32 with packed zero points) written without Python, for machines
 * without onnx and onnxruntime (the 2-core VM): random packed weights straight away instead of
 * f32 weights quantized by ONNX Runtime, so its ids mean nothing, only its speed does.
 *
 *   deno run -A bench/qwen_shaped.ts OUT.onnx [--layers 24] [--vocab 151936] [--accuracy-level 4]
 *
 * (a smaller vocabulary fits a software adapter's 128 MiB bindings, to read a step's plan there;
 * `--accuracy-level 4` marks every MatMulNBits as onnxruntime-genai's CPU models are, A rounded
 * to 8 bits a block)
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
  options: {
    layers: { type: "string", default: "24" },
    vocab: { type: "string", default: "151936" },
    "accuracy-level": { type: "string", default: "0" },
  },
  allowPositionals: true,
});
const out = positionals[0];
if (!out) throw new Error("usage: bench/qwen_shaped.ts OUT.onnx [--layers 24] [--vocab 151936]");
const [layers, hidden, heads, kvHeads, inter, vocab, maxPos] = [
  Number(values.layers),
  896,
  14,
  2,
  4864,
  Number(values.vocab),
  4096,
];
const head = hidden / heads, block = 32;

let seed = 1;
/** A fixed pseudo-random stream in [0, 1). */
const random = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x80000000);
const int = (name: string, i: number): AttributeProto => ({ name, type: 2, i });
const float = (name: string, f: number): AttributeProto => ({ name, type: 1, f });
const inits: TensorProto[] = [];
const nodes: NodeProto[] = [];

/** An f32 initializer of `shape`, uniform in ±`scale`. */
function weight(name: string, shape: number[], scale: number): string {
  const data = Float32Array.from(
    { length: shape.reduce((p, d) => p * d, 1) },
    () => (random() * 2 - 1) * scale,
  );
  inits.push({ name, dims: shape, dataType: 1, rawData: new Uint8Array(data.buffer) });
  return name;
}

/** A node; its first output's name. */
function node(op: string, input: string[], output: string[], attrs: AttributeProto[] = []): string {
  const domain = ["GroupQueryAttention", "SkipSimplifiedLayerNormalization"].includes(op)
    ? "com.microsoft"
    : "";
  nodes.push({ opType: op, domain, input, output, attribute: attrs, name: `${output[0]}_node` });
  return output[0];
}

/** x times a [K, N] weight held as MatMulNBits holds it: random 4-bit blocks, packed zeros. */
function matmul(x: string, name: string, k: number, n: number): string {
  const blocks = k / block, zeros = n * Math.ceil(blocks / 2);
  const bytes = (count: number) => Uint8Array.from({ length: count }, () => random() * 256);
  const scales = Float32Array.from({ length: n * blocks }, () => 0.002 + random() * 0.004);
  inits.push(
    { name: `${name}.q`, dims: [n, blocks, block / 2], dataType: 2, rawData: bytes(n * k / 2) },
    { name: `${name}.s`, dims: [n * blocks], dataType: 1, rawData: new Uint8Array(scales.buffer) },
    { name: `${name}.z`, dims: [zeros], dataType: 2, rawData: bytes(zeros) },
  );
  nodes.push({
    opType: "MatMulNBits",
    domain: "com.microsoft",
    input: [x, `${name}.q`, `${name}.s`, `${name}.z`],
    output: [`${name}.out`],
    attribute: [
      int("K", k),
      int("N", n),
      int("bits", 4),
      int("block_size", block),
      int("accuracy_level", Number(values["accuracy-level"])),
    ],
    name: `${name}_node`,
  });
  return `${name}.out`;
}

/** The attention block of layer `i` over normed input `h`: its output. */
function attention(i: number, h: string): string {
  const proj = (p: string, n: number) =>
    node("Add", [matmul(h, `l${i}.${p}`, hidden, n), weight(`l${i}.${p}_b`, [n], 0.02)], [
      `l${i}.${p}_out`,
    ]);
  const att = node(
    "GroupQueryAttention",
    [
      proj("q", hidden),
      proj("k", kvHeads * head),
      proj("v", kvHeads * head),
      `past_key_values.${i}.key`,
      `past_key_values.${i}.value`,
      "seqlens_k",
      "total_seq_len",
      "cos_cache",
      "sin_cache",
    ],
    [`l${i}.attn`, `present.${i}.key`, `present.${i}.value`],
    [
      int("num_heads", heads),
      int("kv_num_heads", kvHeads),
      int("do_rotary", 1),
      float("scale", 1 / Math.sqrt(head)),
    ],
  );
  return matmul(att, `l${i}.o`, hidden, hidden);
}

/** Skip + RMS norm of `x` and `skip`: the normed value and the new residual. */
function skipNorm(x: string, skip: string, name: string): [string, string] {
  node("SkipSimplifiedLayerNormalization", [x, skip, weight(`${name}.g`, [hidden], 1)], [
    `${name}.out`,
    "",
    "",
    `${name}.resid`,
  ], [float("epsilon", 1e-6)]);
  return [`${name}.out`, `${name}.resid`];
}

const positions = Float64Array.from({ length: maxPos * head / 2 }, (_, j) => {
  const [p, d] = [Math.floor(j / (head / 2)), j % (head / 2)];
  return p / 10000 ** (2 * d / head);
});
for (const [name, fn] of [["cos_cache", Math.cos], ["sin_cache", Math.sin]] as const) {
  const data = Float32Array.from(positions, fn);
  inits.push({ name, dims: [maxPos, head / 2], dataType: 1, rawData: new Uint8Array(data.buffer) });
}
inits.push(
  { name: "one_axis", dims: [1], dataType: 7, int64Data: [1] },
  { name: "one", dims: [], dataType: 7, int64Data: [1] },
);
let x = node("Gather", [weight("embed", [vocab, hidden], 1), "input_ids"], ["embedded"]);
const sum = node("ReduceSum", ["attention_mask", "one_axis"], ["mask_sum"]);
node("Cast", [node("Sub", [sum, "one"], ["mask_sub"])], ["seqlens_k"], [int("to", 6)]);
const total = node("Gather", [node("Shape", ["attention_mask"], ["mask_shape"]), "one"], [
  "mask_total",
], [int("axis", 0)]);
node("Cast", [total], ["total_seq_len"], [int("to", 6)]);
let skip = "";
for (let i = 0; i < layers; i++) {
  let h: string, resid: string;
  if (!skip) {
    h = node("SimplifiedLayerNormalization", [x, weight(`l${i}.ln1`, [hidden], 1)], [
      `l${i}.ln1_out`,
    ], [int("axis", -1), float("epsilon", 1e-6)]);
    resid = x;
  } else [h, resid] = skipNorm(x, skip, `l${i}.ln1`);
  const [h2, resid2] = skipNorm(attention(i, h), resid, `l${i}.ln2`);
  const gate = matmul(h2, `l${i}.gate`, hidden, inter);
  const act = node("Mul", [gate, node("Sigmoid", [gate], [`l${i}.sig`])], [`l${i}.silu`]);
  const up = matmul(h2, `l${i}.up`, hidden, inter);
  x = matmul(node("Mul", [act, up], [`l${i}.gated`]), `l${i}.down`, inter, hidden);
  skip = resid2;
}
const [fin] = skipNorm(x, skip, "final");
node("Identity", [matmul(fin, "lm_head", hidden, vocab)], ["logits"]);

const tensor = (name: string, elemType: number, dims: (number | string)[]): ValueInfoProto => ({
  name,
  type: {
    tensorType: {
      elemType,
      shape: { dim: dims.map((d) => (typeof d === "string" ? { dimParam: d } : { dimValue: d })) },
    },
  },
});
const input = [
  tensor("input_ids", 7, ["batch_size", "sequence_length"]),
  tensor("attention_mask", 7, ["batch_size", "total_sequence_length"]),
];
const output = [tensor("logits", 1, ["batch_size", "sequence_length", vocab])];
for (let i = 0; i < layers; i++) {
  for (const kind of ["key", "value"]) {
    input.push(tensor(`past_key_values.${i}.${kind}`, 1, ["batch_size", kvHeads, "past", head]));
    output.push(tensor(`present.${i}.${kind}`, 1, ["batch_size", kvHeads, "total", head]));
  }
}
Deno.writeFileSync(
  out,
  encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }, { domain: "com.microsoft", version: 1 }],
    graph: { name: "qwen_shaped", node: nodes, initializer: inits, input, output },
  }),
);
console.log(`${out}: ${layers} layers, ${inits.length} initializers`);

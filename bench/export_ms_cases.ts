/**
 * One-node models of ONNX Runtime's com.microsoft ops, with ONNX Runtime Web 1.30's outputs (wasm,
 * one thread), written as ONNX's node cases are: the attention ops (Attention with every mask
 * format, causal and with an attention bias; MultiHeadAttention; EmbedLayerNormalization) into
 * `onnx/testdata/onnx_ms_attention/`, GatherBlockQuantized into `onnx/testdata/onnx_ms_quant/`;
 * opset 21's 4-bit blocked QDQ weights into `onnx/testdata/onnx_qdq4/`, and ONNX's MaxRoiPool
 * into `onnx/testdata/onnx_max_roi_pool/`.
 *
 *   deno run -A --config bench/deno.json bench/export_ms_cases.ts
 *
 * @module
 */
import { type AttributeProto, encodeModel, type TensorProto } from "../onnx/wire/proto.ts";
import { encode, MESSAGES } from "../onnx/wire/proto_codec.ts";

// deno-lint-ignore no-explicit-any
const ort: any = await import("npm:onnxruntime-web@1.30.0");
ort.env.wasm.numThreads = 1;
const TESTDATA = new URL("../onnx/testdata/", import.meta.url).pathname;
let OUT = `${TESTDATA}onnx_ms_attention/`;

let seed = 7;
/** A fixed pseudo-random stream in [-1, 1). */
const random = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x40000000) - 1;
const int = (name: string, i: number): AttributeProto => ({ name, type: 2, i });
const ints = (name: string, v: number[]): AttributeProto => ({ name, type: 7, ints: v });
const float = (name: string, f: number): AttributeProto => ({ name, type: 1, f });
const size = (dims: number[]) => dims.reduce((p, d) => p * d, 1);

/** A float input or initializer of `dims`, or an int32 one of `values`. */
type Data = {
  dims: number[];
  f32?: Float32Array;
  i32?: Int32Array;
  u8?: Uint8Array;
  i64?: number[];
};
const f32 = (...dims: number[]): Data => ({
  dims,
  f32: Float32Array.from({ length: size(dims) }, random),
});
const i32 = (dims: number[], values: number[]): Data => ({ dims, i32: Int32Array.from(values) });

/** A uint8 tensor of `dims`, its bytes drawn. */
const u8 = (...dims: number[]): Data => ({
  dims,
  u8: Uint8Array.from({ length: size(dims) }, () => Math.floor((random() + 1) * 128)),
});

const proto = (name: string, d: Data): TensorProto =>
  d.f32
    ? { name, dims: d.dims, dataType: 1, floatData: Array.from(d.f32) }
    : d.u8
    ? { name, dims: d.dims, dataType: 2, rawData: d.u8 }
    : d.i64
    ? { name, dims: d.dims, dataType: 7, int64Data: d.i64 }
    : { name, dims: d.dims, dataType: 6, int32Data: Array.from(d.i32!) };

/** One case: `inputs` fed, `inits` constant ("" leaves an optional input out). */
async function write(
  name: string,
  op: string,
  inputs: [string, Data | undefined][],
  inits: Record<string, Data>,
  attribute: AttributeProto[],
  outputs: string[],
  domain = "com.microsoft",
): Promise<void> {
  const fed = inputs.filter(([, d]) => d) as [string, Data][];
  const model = encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }, { domain: "com.microsoft", version: 1 }],
    graph: {
      name,
      node: [{
        opType: op,
        domain,
        input: inputs.map(([n, d]) => (d || n in inits ? n : "")),
        output: outputs,
        attribute,
      }],
      initializer: Object.entries(inits).map(([n, d]) => proto(n, d)),
      input: fed.filter(([n]) => !(n in inits)).map(([n, d]) => ({
        name: n,
        type: {
          tensorType: {
            elemType: d.f32 ? 1 : d.i64 ? 7 : 6,
            shape: { dim: d.dims.map((v) => ({ dimValue: v })) },
          },
        },
      })),
      output: outputs.map((o) => ({
        name: o,
        type: { tensorType: { elemType: o === "mask_index" ? 6 : 1 } },
      })),
    },
  });
  const session = await ort.InferenceSession.create(model);
  const feeds = Object.fromEntries(
    fed.filter(([n]) => !(n in inits)).map((
      [n, d],
    ) => [
      n,
      d.i64
        ? new ort.Tensor("int64", BigInt64Array.from(d.i64, BigInt), d.dims)
        : new ort.Tensor(d.f32 ? "float32" : "int32", d.f32 ?? d.i32, d.dims),
    ]),
  );
  const results = await session.run(feeds);
  const dir = `${OUT}${name}/test_data_set_0`;
  Deno.mkdirSync(dir, { recursive: true });
  Deno.writeFileSync(`${OUT}${name}/model.onnx`, model);
  fed.filter(([n]) => !(n in inits)).forEach(([n, d], i) =>
    Deno.writeFileSync(`${dir}/input_${i}.pb`, encode(MESSAGES.tensor, proto(n, d)))
  );
  outputs.forEach((o, i) => {
    const r = results[o];
    const d: Data = r.type === "int32"
      ? { dims: r.dims, i32: r.data as Int32Array }
      : { dims: r.dims, f32: r.data as Float32Array };
    Deno.writeFileSync(`${dir}/output_${i}.pb`, encode(MESSAGES.tensor, proto(o, d)));
  });
  console.log(name, outputs.map((o) => results[o].dims.join("x")).join(" "));
}

const heads = [int("num_heads", 2)];
const x = f32(2, 4, 8), w = { w: f32(8, 24), b: f32(24) };
await write("attention", "Attention", [["x", x], ["w", w.w], ["b", w.b]], w, heads, ["y"]);
await write(
  "attention_raw_mask",
  "Attention",
  [["x", x], ["w", w.w], ["b", w.b], ["mask", i32([2, 4], [1, 1, 1, 1, 1, 1, 0, 0])]],
  w,
  heads,
  ["y"],
);
await write(
  "attention_key_lengths",
  "Attention",
  [["x", x], ["w", w.w], ["b", w.b], ["mask", i32([2], [4, 2])]],
  w,
  heads,
  ["y"],
);
await write(
  "attention_causal_masked",
  "Attention",
  [["x", x], ["w", w.w], ["b", w.b], ["mask", i32([2, 4], [1, 1, 1, 0, 1, 1, 1, 1])]],
  w,
  [...heads, int("unidirectional", 1)],
  ["y"],
);
await write(
  "attention_bias_scale",
  "Attention",
  [["x", x], ["w", w.w], ["b", w.b], ["", undefined], ["", undefined], ["bias", f32(1, 2, 4, 4)]],
  w,
  [...heads, float("scale", 0.3)],
  ["y"],
);
const narrow = { w: f32(8, 20), b: f32(20) };
await write(
  "attention_qkv_sizes",
  "Attention",
  [["x", x], ["w", narrow.w], ["b", narrow.b]],
  narrow,
  [...heads, ints("qkv_hidden_sizes", [8, 8, 4])],
  ["y"],
);
await write(
  "multi_head_attention",
  "MultiHeadAttention",
  [
    ["q", f32(2, 4, 8)],
    ["k", f32(2, 5, 8)],
    ["v", f32(2, 5, 6)],
    ["bias", f32(22)],
    ["mask", i32([2, 5], [1, 1, 1, 1, 1, 1, 1, 1, 0, 0])],
  ],
  {},
  heads,
  ["y"],
);
await write(
  "multi_head_attention_plain",
  "MultiHeadAttention",
  [["q", f32(2, 3, 8)], ["k", f32(2, 3, 8)], ["v", f32(2, 3, 8)]],
  {},
  [...heads, float("scale", 0.5)],
  ["y"],
);
const tables = {
  word: f32(10, 8),
  pos: f32(6, 8),
  seg: f32(2, 8),
  gamma: f32(8),
  beta: f32(8),
};
await write(
  "embed_layer_normalization",
  "EmbedLayerNormalization",
  [
    ["ids", i32([2, 4], [1, 5, 9, 0, 3, 3, 7, 2])],
    ["segments", i32([2, 4], [0, 0, 1, 1, 0, 1, 1, 1])],
    ["word", tables.word],
    ["pos", tables.pos],
    ["seg", tables.seg],
    ["gamma", tables.gamma],
    ["beta", tables.beta],
    ["mask", i32([2, 4], [1, 1, 1, 1, 1, 1, 0, 0])],
  ],
  tables,
  [float("epsilon", 1e-5), int("mask_index_type", 1)],
  ["y", "mask_index", "sum"],
);
await write(
  "embed_layer_normalization_words_only",
  "EmbedLayerNormalization",
  [
    ["ids", i32([2, 3], [4, 0, 9, 8, 1, 1])],
    ["", undefined],
    ["word", tables.word],
    ["pos", tables.pos],
    ["", undefined],
    ["gamma", tables.gamma],
    ["beta", tables.beta],
  ],
  { word: tables.word, pos: tables.pos, gamma: tables.gamma, beta: tables.beta },
  [],
  ["y", "mask_index"],
);

OUT = `${TESTDATA}onnx_ms_quant/`;
const blocks = (bits: number, zeros: boolean) => ({
  data: u8(5, (32 * bits) / 8),
  scales: { dims: [5, 2], f32: Float32Array.from({ length: 10 }, () => 0.01 + random() * 0.05) },
  ...(zeros ? { zp: u8(5, Math.ceil((2 * bits) / 8)) } : {}),
});
for (const [bits, zeros] of [[4, false], [4, true], [8, true], [2, true]] as const) {
  const t = blocks(bits, zeros);
  await write(
    `gather_block_quantized_${bits}${zeros ? "_zp" : ""}`,
    "GatherBlockQuantized",
    [["data", t.data], ["ids", i32([2, 2], [0, 4, 2, 4])], ["scales", t.scales], [
      "zp",
      t.zp,
    ]],
    t,
    [int("bits", bits), int("block_size", 16), int("gather_axis", 0), int("quantize_axis", 1)],
    ["y"],
  );
}

// Opset 21's 4-bit and blocked quantization (QDQ weights as ONNX Runtime's 4-bit quantizer writes
// them): DequantizeLinear (and QuantizeLinear) of uint4/int4 initializers in blocks, into a MatMul.
OUT = `${TESTDATA}onnx_qdq4/`;
/** Two 4-bit values a byte, the first in the low bits. */
const nibbles = (values: number[]) => {
  const bytes = new Uint8Array(Math.ceil(values.length / 2));
  values.forEach((v, i) => bytes[i >> 1] |= (v & 15) << ((i & 1) * 4));
  return bytes;
};
const fours = (name: string, dims: number[], signed: boolean): TensorProto => ({
  name,
  dims,
  dataType: signed ? 22 : 21,
  rawData: nibbles(
    Array.from({ length: size(dims) }, () => Math.floor((random() + 1) * 8) - (signed ? 8 : 0)),
  ),
});
const scales = (name: string, dims: number[]): TensorProto => ({
  name,
  dims,
  dataType: 1,
  floatData: Array.from({ length: size(dims) }, () => 0.05 + (random() + 1) * 0.1),
});

/** A graph of `nodes` at opset 21 over float input `a`, `inits` constant, output `y`. */
async function qdq(
  name: string,
  a: Data,
  nodes: { opType: string; input: string[]; output: string[]; axis: number; block: number }[],
  inits: TensorProto[],
): Promise<void> {
  const model = encodeModel({
    irVersion: 10,
    opsetImport: [{ domain: "", version: 21 }],
    graph: {
      name,
      node: nodes.map((n) => ({
        opType: n.opType,
        input: n.input,
        output: n.output,
        attribute: n.opType === "MatMul" ? [] : [int("axis", n.axis), int("block_size", n.block)],
      })),
      initializer: inits,
      input: [{
        name: "a",
        type: { tensorType: { elemType: 1, shape: { dim: a.dims.map((d) => ({ dimValue: d })) } } },
      }],
      output: [{ name: "y", type: { tensorType: { elemType: 1 } } }],
    },
  });
  const session = await ort.InferenceSession.create(model);
  const { y } = await session.run({ a: new ort.Tensor("float32", a.f32, a.dims) });
  const dir = `${OUT}${name}/test_data_set_0`;
  Deno.mkdirSync(dir, { recursive: true });
  Deno.writeFileSync(`${OUT}${name}/model.onnx`, model);
  Deno.writeFileSync(`${dir}/input_0.pb`, encode(MESSAGES.tensor, proto("a", a)));
  Deno.writeFileSync(
    `${dir}/output_0.pb`,
    encode(MESSAGES.tensor, proto("y", { dims: y.dims, f32: y.data })),
  );
  console.log(name, y.dims.join("x"));
}

const dq = (axis: number, block: number, z = true) => ({
  opType: "DequantizeLinear",
  input: ["w", "s", ...(z ? ["z"] : [])],
  output: ["wf"],
  axis,
  block,
});
const matmul = { opType: "MatMul", input: ["a", "wf"], output: ["y"], axis: 0, block: 0 };
await qdq("dequantize_int4_blocks_matmul", f32(2, 4), [dq(1, 4), matmul], [
  fours("w", [4, 8], true),
  scales("s", [4, 2]),
  fours("z", [4, 2], true),
]);
await qdq("dequantize_uint4_blocks_axis0_matmul", f32(3, 8), [dq(0, 4), matmul], [
  fours("w", [8, 6], false),
  scales("s", [2, 6]),
  fours("z", [2, 6], false),
]);
await qdq("dequantize_uint4_ragged_blocks_no_zero", f32(2, 5), [dq(1, 4, false), matmul], [
  fours("w", [5, 10], false),
  scales("s", [5, 3]),
]);
await qdq(
  "quantize_dequantize_int4_blocks",
  { dims: [3, 8], f32: Float32Array.from({ length: 24 }, () => random() * 3) },
  [
    { opType: "QuantizeLinear", input: ["a", "s", "z"], output: ["q"], axis: 1, block: 4 },
    { opType: "DequantizeLinear", input: ["q", "s", "z"], output: ["y"], axis: 1, block: 4 },
  ],
  [scales("s", [3, 2]), fours("z", [3, 2], true)],
);

// MaxRoiPool (ONNX's own, opset 1): regions inside, across and past the image, a zero scale's
// single pixel, bins of one pixel and of several.
OUT = `${TESTDATA}onnx_max_roi_pool/`;
const image = f32(2, 3, 6, 7);
for (
  const [name, rois, pooled, scale] of [
    ["max_roi_pool", [0, 0, 0, 6, 5, 1, 2, 1, 5, 4], [2, 2], 1],
    ["max_roi_pool_scaled_past_edge", [1, 4, 2, 20, 12, 0, 1, 1, 1, 1], [3, 2], 0.5],
    ["max_roi_pool_fine_bins", [0, 1, 0, 3, 5, 1, 0, 0, 6, 5], [4, 3], 1],
  ] as const
) {
  await write(
    name,
    "MaxRoiPool",
    [["x", image], ["rois", { dims: [2, 5], f32: Float32Array.from(rois) }]],
    { rois: { dims: [2, 5], f32: Float32Array.from(rois) } },
    [ints("pooled_shape", [...pooled]), float("spatial_scale", scale)],
    ["y"],
    "",
  );
}

// GroupQueryAttention: first prompts (padded too, packed QKV, rotary halves and interleaved
// pairs of part of each head, a local window with softcap) and a decoding step after a past.
OUT = `${TESTDATA}onnx_ms_attention/`;
const caches = (rows: number, half: number) => {
  const angle = (p: number, i: number) => p / 10000 ** (i / half);
  const grid = (f: (v: number) => number) =>
    Float32Array.from({ length: rows * half }, (_, k) => f(angle(Math.floor(k / half), k % half)));
  return {
    cos: { dims: [rows, half], f32: grid(Math.cos) },
    sin: { dims: [rows, half], f32: grid(Math.sin) },
  };
};
const gqa = [int("num_heads", 4), int("kv_num_heads", 2)];
const total = (v: number) => ({ dims: [], i32: Int32Array.from([v]) });
await write(
  "group_query_attention_prompt",
  "GroupQueryAttention",
  [
    ["q", f32(2, 4, 32)],
    ["k", f32(2, 4, 16)],
    ["v", f32(2, 4, 16)],
    ["", undefined],
    ["", undefined],
    ["seqlens", i32([2], [3, 3])],
    ["total", total(4)],
  ],
  {},
  gqa,
  ["y", "present_key", "present_value"],
);
await write(
  "group_query_attention_prompt_padded_packed",
  "GroupQueryAttention",
  [
    ["qkv", f32(2, 4, 64)],
    ["", undefined],
    ["", undefined],
    ["", undefined],
    ["", undefined],
    ["seqlens", i32([2], [3, 1])],
    ["total", total(4)],
  ],
  {},
  gqa,
  ["y", "present_key", "present_value"],
);
for (
  const [name, interleaved, h, half] of [["rotary", 0, 16, 8], [
    "rotary_interleaved_partial",
    1,
    32,
    8,
  ]] as const
) {
  const { cos, sin } = caches(16, half);
  await write(
    `group_query_attention_decode_${name}`,
    "GroupQueryAttention",
    [
      ["q", f32(1, 1, 4 * h)],
      ["k", f32(1, 1, 2 * h)],
      ["v", f32(1, 1, 2 * h)],
      ["past_key", f32(1, 2, 3, h)],
      ["past_value", f32(1, 2, 3, h)],
      ["seqlens", i32([1], [3])],
      ["total", total(4)],
      ["cos", cos],
      ["sin", sin],
    ],
    { cos, sin },
    [...gqa, int("do_rotary", 1), int("rotary_interleaved", interleaved)],
    ["y", "present_key", "present_value"],
  );
}
await write(
  "group_query_attention_window_softcap",
  "GroupQueryAttention",
  [
    ["q", f32(1, 5, 32)],
    ["k", f32(1, 5, 16)],
    ["v", f32(1, 5, 16)],
    ["", undefined],
    ["", undefined],
    ["seqlens", i32([1], [4])],
    ["total", total(5)],
  ],
  {},
  [...gqa, int("local_window_size", 2), float("softcap", 2)],
  ["y", "present_key", "present_value"],
);

// RotaryEmbedding (ONNX Runtime's): 3-D input with position ids, 4-D with one offset, interleaved.
for (
  const [name, x, ids, attrs] of [
    ["rotary_embedding", f32(2, 3, 64), { dims: [2, 3], i64: [0, 1, 2, 5, 6, 7] }, [
      int("num_heads", 4),
    ]],
    ["rotary_embedding_4d_offset", f32(1, 2, 3, 16), { dims: [1], i64: [4] }, []],
    [
      "rotary_embedding_interleaved",
      f32(1, 3, 32),
      { dims: [1, 3], i64: [2, 3, 4] },
      [int("num_heads", 2), int("interleaved", 1)],
    ],
  ] as const
) {
  const { cos, sin } = caches(16, 8);
  await write(
    name,
    "RotaryEmbedding",
    [["x", x], ["ids", { dims: [...ids.dims], i64: [...ids.i64] }], ["cos", cos], ["sin", sin]],
    { cos, sin },
    [...attrs],
    ["y"],
  );
}

// Attention after a past (GPT-2 as ONNX Runtime's optimizer fuses it): causal, a raw mask over
// past and new tokens, the present output.
await write(
  "attention_past_causal",
  "Attention",
  [
    ["x", f32(1, 2, 8)],
    ["w", w.w],
    ["b", w.b],
    ["mask", i32([1, 5], [0, 1, 1, 1, 1])],
    ["past", f32(2, 1, 2, 3, 4)],
  ],
  w,
  [...heads, int("unidirectional", 1)],
  ["y", "present"],
);

// MultiHeadAttention after a past of keys and values, causal, with both presents.
await write(
  "multi_head_attention_past",
  "MultiHeadAttention",
  [
    ["q", f32(1, 2, 8)],
    ["k", f32(1, 2, 8)],
    ["v", f32(1, 2, 8)],
    ["", undefined],
    ["", undefined],
    ["", undefined],
    ["past_key", f32(1, 2, 3, 4)],
    ["past_value", f32(1, 2, 3, 4)],
  ],
  {},
  [...heads, int("unidirectional", 1)],
  ["y", "present_key", "present_value"],
);

// GroupQueryAttention decoding a batch of sequences of different lengths after a past: sequence
// b's present is its first seqlens[b] + 1 − S past entries, its S new ones, then zeros, as long
// as total_sequence_length; two new tokens after a past; and one sequence whose valid past is
// shorter than its past buffer.
{
  const { cos, sin } = caches(16, 8);
  await write(
    "group_query_attention_decode_batch_ragged",
    "GroupQueryAttention",
    [
      ["q", f32(2, 1, 64)],
      ["k", f32(2, 1, 32)],
      ["v", f32(2, 1, 32)],
      ["past_key", f32(2, 2, 5, 16)],
      ["past_value", f32(2, 2, 5, 16)],
      ["seqlens", i32([2], [5, 2])],
      ["total", total(6)],
      ["cos", cos],
      ["sin", sin],
    ],
    { cos, sin },
    [...gqa, int("do_rotary", 1)],
    ["y", "present_key", "present_value"],
  );
}
// Two new tokens after a past (ONNX Runtime takes those for one sequence only).
await write(
  "group_query_attention_decode_two_tokens",
  "GroupQueryAttention",
  [
    ["q", f32(1, 2, 32)],
    ["k", f32(1, 2, 16)],
    ["v", f32(1, 2, 16)],
    ["past_key", f32(1, 2, 4, 8)],
    ["past_value", f32(1, 2, 4, 8)],
    ["seqlens", i32([1], [4])],
    ["total", total(5)],
  ],
  {},
  gqa,
  ["y", "present_key", "present_value"],
);
// A valid past shorter than its buffer (4 entries, 2 valid), and a present as long as its past (a
// generation's fixed capacity, 5): ONNX Runtime writes the valid past, the new entry, then zeros,
// into a present of its own.
for (const [name, buffer] of [["short_past", 4], ["shared_buffer", 5]] as const) {
  await write(
    `group_query_attention_decode_${name}`,
    "GroupQueryAttention",
    [
      ["q", f32(1, 1, 32)],
      ["k", f32(1, 1, 16)],
      ["v", f32(1, 1, 16)],
      ["past_key", f32(1, 2, buffer, 8)],
      ["past_value", f32(1, 2, buffer, 8)],
      ["seqlens", i32([1], [2])],
      ["total", total(5)],
    ],
    {},
    gqa,
    ["y", "present_key", "present_value"],
  );
}

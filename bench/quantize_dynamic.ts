/**
 * An ONNX model's MatMuls by constant weights rewritten as ONNX Runtime's `quantize_dynamic`
 * writes them (its defaults: int8 weights, symmetric and per tensor; u8 activations quantized at
 * run time): `DynamicQuantizeLinear(A)`, `MatMulInteger(A_q, W_q, A_zero)`, a `Cast` to f32 and a
 * `Mul` by A's scale times W's. For CPU timings of an int8 model on a machine without ONNX
 * Runtime's Python quantizer (the GPU machine applies the real one:
 * `bench/export_quant_models.py`), e.g. on `bench/bert_shaped.ts`'s encoder.
 *
 *   deno run -A bench/quantize_dynamic.ts IN.onnx OUT.onnx
 *
 * Copies the inputs beside IN (`IN.in.NAME.DTYPE.bin`) to OUT's names.
 *
 * @module
 */
import { decodeModel, encodeModel, protoOf, tensorOf } from "../onnx/wire/proto.ts";
import type { NodeProto, TensorProto } from "../onnx/wire/proto.ts";

const [src, out] = Deno.args;
if (!src || !out) throw new Error("usage: bench/quantize_dynamic.ts IN.onnx OUT.onnx");
const model = decodeModel(await Deno.readFile(src));
const graph = model.graph!;
const weights = new Map(graph.initializer.map((t) => [t.name ?? "", t]));

/** `w` as int8 symmetric per tensor: the values and their scale. */
function quantized(w: Float32Array): { q: Int8Array; scale: number } {
  const top = w.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
  const scale = top / 127 || 1;
  return {
    q: Int8Array.from(w, (v) => Math.max(-127, Math.min(127, Math.round(v / scale)))),
    scale,
  };
}

const added: TensorProto[] = [];
const nodes: NodeProto[] = [];
let count = 0;
for (const node of graph.node) {
  const w = node.opType === "MatMul" ? weights.get(node.input[1]) : undefined;
  const data = w ? tensorOf(w, node.input[1]) : undefined;
  if (!w || !data || data.dtype !== "f32" || data.shape.length !== 2) {
    nodes.push(node);
    continue;
  }
  const [a] = node.input, name = `${node.output[0]}_q`;
  const { q, scale } = quantized(data.data as Float32Array);
  added.push(
    protoOf(`${node.input[1]}_quantized`, { data: q, shape: data.shape, dtype: "i8" }),
    protoOf(`${node.input[1]}_scale`, { data: Float32Array.of(scale), shape: [], dtype: "f32" }),
  );
  const aq = [`${name}_a`, `${name}_a_scale`, `${name}_a_zero`];
  nodes.push(
    { opType: "DynamicQuantizeLinear", input: [a], output: aq, attribute: [] },
    {
      opType: "Mul",
      input: [aq[1], `${node.input[1]}_scale`],
      output: [`${name}_scales`],
      attribute: [],
    },
    {
      opType: "MatMulInteger",
      input: [aq[0], `${node.input[1]}_quantized`, aq[2]],
      output: [`${name}_i32`],
      attribute: [],
    },
    {
      opType: "Cast",
      input: [`${name}_i32`],
      output: [`${name}_f32`],
      attribute: [{ name: "to", type: 2, i: 1 }],
    },
    {
      opType: "Mul",
      input: [`${name}_f32`, `${name}_scales`],
      output: node.output,
      attribute: [],
    },
  );
  count++;
}
const used = new Set(nodes.flatMap((n) => n.input));
graph.node = nodes;
graph.initializer = [...graph.initializer.filter((t) => used.has(t.name ?? "")), ...added];
await Deno.writeFile(out, encodeModel(model));
const dir = src.includes("/") ? src.slice(0, src.lastIndexOf("/")) : ".";
const stem = src.slice(dir.length + 1).replace(/\.onnx$/, "");
for await (const f of Deno.readDir(dir)) {
  if (f.name.startsWith(`${stem}.in.`)) {
    await Deno.copyFile(`${dir}/${f.name}`, out.replace(/\.onnx$/, "") + f.name.slice(stem.length));
  }
}
console.log(`${out}: ${count} MatMuls quantized`);

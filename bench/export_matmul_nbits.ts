/**
 * One-node models of com.microsoft MatMulNBits (the block-quantized weights of ONNX Runtime's int4
 * language models and transformers.js's `q4` exports), B, scales and zero points initializers,
 * with ONNX Runtime Web 1.30's outputs (wasm, one thread): `onnx/testdata/matmul_nbits/NAME.onnx`,
 * `NAME.in.A.float32.bin` and `NAME.out.Y.float32.bin`.
 *
 *   deno run -A --config bench/deno.json bench/export_matmul_nbits.ts
 *
 * @module
 */
import { type AttributeProto, encodeModel, type TensorProto } from "../onnx/wire/proto.ts";

// deno-lint-ignore no-explicit-any
const ort: any = await import("npm:onnxruntime-web@1.30.0");
ort.env.wasm.numThreads = 1;
const OUT = new URL("../onnx/testdata/matmul_nbits/", import.meta.url).pathname;
Deno.mkdirSync(OUT, { recursive: true });

let seed = 1;
/** A fixed pseudo-random stream in [0, 1). */
const random = () => ((seed = (seed * 1103515245 + 12345) & 0x7fffffff) / 0x80000000);
const int = (name: string, i: number): AttributeProto => ({ name, type: 2, i });

/** One case: A of `shape`, B [N, K] in `bits`-bit blocks of `block`, zero points as `zero`. */
async function write(
  name: string,
  shape: number[],
  [k, n, bits, block]: number[],
  zero: "none" | "packed" | "float",
  bias = false,
): Promise<void> {
  const blocks = Math.ceil(k / block), blob = (block * bits) / 8;
  const inits: TensorProto[] = [
    {
      name: "B",
      dims: [n, blocks, blob],
      dataType: 2,
      rawData: Uint8Array.from({ length: n * blocks * blob }, () => Math.floor(random() * 256)),
    },
    {
      name: "scales",
      dims: [n * blocks],
      dataType: 1,
      floatData: Array.from({ length: n * blocks }, () => 0.01 + random() * 0.1),
    },
  ];
  const inputs = ["A", "B", "scales"];
  if (zero === "packed") {
    const bytes = n * Math.ceil((blocks * bits) / 8);
    inits.push({
      name: "zp",
      dims: [bytes],
      dataType: 2,
      rawData: Uint8Array.from({ length: bytes }, () => Math.floor(random() * 256)),
    });
    inputs.push("zp");
  } else if (zero === "float") {
    const zp = Array.from({ length: n * blocks }, () => random() * (1 << bits));
    inits.push({ name: "zp", dims: [n * blocks], dataType: 1, floatData: zp });
    inputs.push("zp");
  }
  if (bias) {
    while (inputs.length < 5) inputs.push("");
    inits.push({
      name: "bias",
      dims: [n],
      dataType: 1,
      floatData: Array.from({ length: n }, random),
    });
    inputs.push("bias");
  }
  const model = encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }, { domain: "com.microsoft", version: 1 }],
    graph: {
      name,
      node: [{
        opType: "MatMulNBits",
        domain: "com.microsoft",
        input: inputs,
        output: ["Y"],
        attribute: [
          int("K", k),
          int("N", n),
          int("bits", bits),
          int("block_size", block),
          int("accuracy_level", 0),
        ],
      }],
      initializer: inits,
      input: [{
        name: "A",
        type: { tensorType: { elemType: 1, shape: { dim: shape.map((d) => ({ dimValue: d })) } } },
      }],
      output: [{ name: "Y", type: { tensorType: { elemType: 1 } } }],
    },
  });
  const a = Float32Array.from({ length: shape.reduce((p, d) => p * d, 1) }, () => random() * 2 - 1);
  const session = await ort.InferenceSession.create(model);
  const y = (await session.run({ A: new ort.Tensor("float32", a, shape) })).Y.data as Float32Array;
  Deno.writeFileSync(`${OUT}${name}.onnx`, model);
  Deno.writeFileSync(`${OUT}${name}.in.A.float32.bin`, new Uint8Array(a.buffer));
  Deno.writeFileSync(`${OUT}${name}.out.Y.float32.bin`, new Uint8Array(y.buffer));
  console.log(name, y.length);
}

await write("nbits_4_block16", [2, 3, 64], [64, 24, 4, 16], "none");
await write("nbits_4_block32_ragged_zp_bias", [3, 80], [80, 10, 4, 32], "packed", true);
await write("nbits_4_float_zp", [1, 2, 64], [64, 8, 4, 32], "float");
await write("nbits_8_block16_zp", [2, 32], [32, 8, 8, 16], "packed");
await write("nbits_2_block16_zp", [2, 32], [32, 8, 2, 16], "packed");

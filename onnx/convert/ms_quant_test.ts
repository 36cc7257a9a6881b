import assert from "node:assert/strict";
import { assertClose, numbers } from "../../jit/testing/testing.ts";
import { failingCases } from "../../tools/conformance/conformance.ts";
import { OnnxModel } from "../model.ts";
import { testModel, valueInfo } from "../testdata.ts";
import type { AttributeProto, TensorProto } from "../wire/proto.ts";
import "../../mod.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { sizeOf } from "../../jit/ir/shape.ts";

const u8 = (name: string, v: number[], dims = [v.length]): TensorProto => ({
  name,
  dims,
  dataType: 2,
  rawData: Uint8Array.from(v),
});
const f32 = (name: string, v: number[], dims = [v.length]): TensorProto => ({
  name,
  dims,
  dataType: 1,
  floatData: v,
});

/** One com.microsoft node over u8 input x [2, 3, 2, 2] and constant operands `consts`. */
function model(
  op: string,
  inputs: string[],
  consts: TensorProto[],
  attribute: AttributeProto[] = [],
) {
  return testModel({
    node: [{ opType: op, domain: "com.microsoft", input: inputs, output: ["y"], attribute }],
    initializer: consts,
    input: [valueInfo("x", 2, [2, 3, 2, 2])],
    output: [valueInfo("y", 2)],
  }, { microsoft: true });
}

const X = Array.from({ length: 24 }, (_, i) => (i * 37) % 256);
const [xs, xz, ys, yz] = [0.05, 128, 0.02, 100];
/** Arithmetic as kiln's f32 does it, one rounding per op. */
const f = Math.fround;
const deq = (q: number) => f((q - xz) * f(xs));
/** QuantizeLinear's rounding: half to even, saturated to u8. */
const quant = (v: number, s = ys, z = yz) => {
  const r = f(v / f(s)), fl = Math.floor(r), d = r - fl;
  const even = d > 0.5 || (d === 0.5 && fl % 2 !== 0) ? fl + 1 : fl;
  return Math.min(255, Math.max(0, even + z));
};
const scales = [f32("xs", [xs], []), u8("xz", [xz], []), f32("ys", [ys], []), u8("yz", [yz], [])];

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: ONNX Runtime's quantized contrib ops dequantize, compute and requantize`, async () => {
    const run = async (m: OnnxModel) => {
      try {
        const x = { data: Uint8Array.from(X), shape: [2, 3, 2, 2], dtype: "u8" as const };
        return numbers((await m.run({ x }, { backend, cache: false })).y.data);
      } finally {
        m.dispose();
      }
    };
    const exact = (got: number[], want: number[], message: string) =>
      assertClose(got, want, { atol: 0, rtol: 0, message });

    const b = X.map((_, i) => (i * 11) % 256);
    exact(
      await run(
        model("QLinearAdd", ["x", "xs", "xz", "b", "xs", "xz", "ys", "yz"], [
          ...scales,
          u8("b", b, [2, 3, 2, 2]),
        ]),
      ),
      X.map((q, i) => quant(f(deq(q) + deq(b[i])))),
      "QLinearAdd",
    );
    exact(
      await run(
        model("QLinearMul", ["x", "xs", "xz", "b", "xs", "xz", "ys", "yz"], [
          ...scales,
          u8("b", b, [2, 3, 2, 2]),
        ]),
      ),
      X.map((q, i) => quant(f(deq(q) * deq(b[i])))),
      "QLinearMul",
    );
    exact(
      await run(
        model("QLinearLeakyRelu", ["x", "xs", "xz", "ys", "yz"], scales, [{
          name: "alpha",
          type: 1,
          f: 0.25,
        }]),
      ),
      X.map((q) => quant(deq(q) > 0 ? deq(q) : f(f(0.25) * deq(q)))),
      "QLinearLeakyRelu",
    );
    const sig = (v: number) => 1 / (1 + Math.exp(-v));
    assertClose(
      await run(model("QLinearSigmoid", ["x", "xs", "xz", "ys", "yz"], scales)),
      X.map((q) => quant(sig(deq(q)))),
      { atol: 1, rtol: 0, message: "QLinearSigmoid (one step where exp rounds)" },
    );
    // Softmax over the last axis (pairs), opset 13's meaning; exp may round either way.
    const soft = (a: number, b: number) => Math.exp(a) / (Math.exp(a) + Math.exp(b));
    assertClose(
      await run(
        model("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], scales, [{
          name: "axis",
          type: 2,
          i: -1,
        }]),
      ),
      X.map((q, i) => quant(soft(deq(q), deq(X[i ^ 1])))),
      { atol: 1, rtol: 0, message: "QLinearSoftmax" },
    );
    // Mean over each 2×2 plane.
    exact(
      await run(model("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], scales)),
      [0, 1, 2, 3, 4, 5].map((p) =>
        quant([0, 1, 2, 3].reduce((s, j) => s + deq(X[p * 4 + j]), 0) / 4)
      ),
      "QLinearGlobalAveragePool",
    );
    // x = 111 dequantizes to −0.85000002, which over y's scale 0.02 is −42.500002, a hair past a
    // rounding tie: llvmpipe's unfused fma once made the division −42.5 (see `k_fdiv`).
    exact(
      await run(
        model("QLinearConcat", ["ys", "yz", "x", "xs", "xz", "x", "xs", "xz"], scales, [{
          name: "axis",
          type: 2,
          i: 3,
        }]),
      ),
      [...Array(12).keys()].flatMap((r) => {
        const row = X.slice(r * 2, r * 2 + 2).map((q) => quant(deq(q)));
        return [...row, ...row];
      }),
      "QLinearConcat",
    );
  });
}

/**
 * MatMulNBits over 2-, 4- and 8-bit blocks (a K past the last whole block, packed and float zero
 * points, a bias), against ONNX Runtime Web 1.30 (`bench/export_matmul_nbits.ts`).
 */
const NBITS = new URL("../testdata/matmul_nbits/", import.meta.url).pathname;
const nbits = [...Deno.readDirSync(NBITS)].map((e) => e.name).filter((f) => f.endsWith(".onnx"))
  .map((f) => f.slice(0, -5)).sort();

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: MatMulNBits matches ONNX Runtime Web`, async () => {
    assert.equal(nbits.length, 5);
    for (const name of nbits) {
      const model = await OnnxModel.load(`${NBITS}${name}.onnx`);
      const a = new Float32Array((await Deno.readFile(`${NBITS}${name}.in.A.float32.bin`)).buffer);
      const want = new Float32Array(
        (await Deno.readFile(`${NBITS}${name}.out.Y.float32.bin`)).buffer,
      );
      const shape = model.inputs[0].dims as number[];
      const { Y } = await model.run({ A: { data: a, shape, dtype: "f32" } }, {
        backend,
        cache: false,
      });
      const scale = Math.max(...want.map(Math.abs));
      assertClose(numbers(Y.data), [...want], { atol: 1e-5 * scale, rtol: 0, message: name });
      model.dispose();
    }
  });
}

/**
 * GatherBlockQuantized over 2-, 4- and 8-bit tables, with and without zero points, against ONNX
 * Runtime Web 1.30 (`bench/export_ms_cases.ts`).
 */
const QUANT = new URL("../testdata/onnx_ms_quant/", import.meta.url).pathname;

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: GatherBlockQuantized matches ONNX Runtime Web`, async () => {
    assert.deepEqual(await failingCases(QUANT, backend, 4), []);
  });
}

/** Bytes of the data a model's graph holds: its params and constants. */
function dataBytes(m: OnnxModel): number {
  const g = m.graph();
  const bytes = (t?: { data?: ArrayBufferView }) => t?.data?.byteLength ?? 0;
  return g.params.reduce((sum, p) => sum + bytes(p), 0) +
    g.nodes.filter((nd) => nd.op === "Constant")
      .reduce((sum, nd) => sum + bytes(nd.attrs?.value as { data?: ArrayBufferView }), 0);
}

/**
 * A MatMulNBits weight past 2^20 elements stays packed (dequantized by graph ops as the product
 * reads it): a 4-bit [1024, 1040] weight in blocks of 32 (the last one ragged) with packed zero
 * points, against the same weight dequantized here and multiplied out. One row (a decoder's token
 * step) unpacks the weight inside the product, never into an f32 [K, N] buffer; eight rows unpack
 * it once, stored, and tile the product.
 */
for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: a large MatMulNBits weight stays packed and computes as dequantized`, async () => {
    const [k, n, bits, block] = [1040, 1024, 4, 32];
    const blocks = Math.ceil(k / block), blob = (block * bits) / 8;
    const zeroStride = Math.ceil((blocks * bits) / 8);
    let seed = 7;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    const q = Array.from({ length: n * blocks * blob }, () => Math.floor(next() * 256));
    const zp = Array.from({ length: n * zeroStride }, () => Math.floor(next() * 256));
    const sc = Array.from({ length: n * blocks }, () => f(0.01 + next() * 0.02));
    const nibble = (bytes: number[], at: number) => (bytes[at >> 1] >> (4 * (at & 1))) & 15;
    const w = new Float32Array(k * n);
    for (let col = 0; col < n; col++) {
      for (let j = 0; j < k; j++) {
        const b = Math.floor(j / block);
        const v = nibble(q, (col * blocks + b) * blob * 2 + (j % block));
        const z = nibble(zp, col * zeroStride * 2 + b);
        w[j * n + col] = f((v - z) * sc[col * blocks + b]);
      }
    }
    const x = Float32Array.from({ length: 8 * k }, () => next() * 2 - 1);
    const want = new Float64Array(8 * n);
    for (let r = 0; r < 8; r++) {
      for (let j = 0; j < k; j++) {
        for (let col = 0; col < n; col++) want[r * n + col] += x[r * k + j] * w[j * n + col];
      }
    }
    const model = (rows: number) =>
      testModel({
        node: [{
          opType: "MatMulNBits",
          domain: "com.microsoft",
          input: ["a", "B", "scales", "zp"],
          output: ["y"],
          attribute: [
            { name: "K", type: 2, i: k },
            { name: "N", type: 2, i: n },
            { name: "bits", type: 2, i: bits },
            { name: "block_size", type: 2, i: block },
          ],
        }],
        initializer: [
          u8("B", q, [n, blocks, blob]),
          f32("scales", sc, [n * blocks]),
          u8("zp", zp, [n * zeroStride]),
        ],
        input: [valueInfo("a", 1, [rows, k])],
        output: [valueInfo("y", 1)],
      }, { microsoft: true });
    // Packed: the graph's data is the weight's bytes and an f32 scale and zero point a block (the
    // f32 weight would be 4.3 MB).
    const m = model(1);
    assert.ok(dataBytes(m) < 1.1 * (q.length + 8 * sc.length), `${dataBytes(m)} B`);
    for (const rows of [1, 8]) {
      const m = model(rows);
      const unpacked = fuse(m.graph()).kernels.flatMap((kernel) => kernel.outputs)
        .some((o) => sizeOf(o.shape) === k * n);
      assert.equal(unpacked, rows > 1, `${rows} rows: an f32 [K, N] weight stored`);
      const { y } = await m.run({
        a: { data: x.slice(0, rows * k), shape: [rows, k], dtype: "f32" },
      }, {
        backend,
        cache: false,
      });
      assertClose(numbers(y.data), Array.from(want.slice(0, rows * n)), {
        atol: 1e-3,
        rtol: 1e-4,
        message: `${backend}, ${rows} rows`,
      });
    }
  });
}

/**
 * A GatherBlockQuantized table past 2^20 values stays packed (the gathered rows dequantized by
 * graph ops): a 4-bit [1100, 1024] table in blocks of 32 with packed zero points, against its
 * rows dequantized here.
 */
for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: a large GatherBlockQuantized table stays packed and gathers as dequantized`, async () => {
    const [rows, width, block] = [1100, 1024, 32];
    const blocks = width / block, zeroStride = Math.ceil(blocks / 2);
    let seed = 11;
    const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    const q = Array.from({ length: rows * width / 2 }, () => Math.floor(next() * 256));
    const zp = Array.from({ length: rows * zeroStride }, () => Math.floor(next() * 256));
    const sc = Array.from({ length: rows * blocks }, () => f(0.01 + next() * 0.02));
    const nibble = (bytes: number[], at: number) => (bytes[at >> 1] >> (4 * (at & 1))) & 15;
    const ids = [3, 1099, 0, 517];
    const want = ids.flatMap((r) =>
      Array.from({ length: width }, (_, j) => {
        const b = Math.floor(j / block);
        return f(
          (nibble(q, r * width + j) - nibble(zp, r * zeroStride * 2 + b)) * sc[r * blocks + b],
        );
      })
    );
    const m = testModel({
      node: [{
        opType: "GatherBlockQuantized",
        domain: "com.microsoft",
        input: ["table", "ids", "scales", "zp"],
        output: ["y"],
        attribute: [{ name: "block_size", type: 2, i: block }, { name: "bits", type: 2, i: 4 }],
      }],
      initializer: [
        u8("table", q, [rows, width / 2]),
        f32("scales", sc, [rows, blocks]),
        u8("zp", zp, [rows, zeroStride]),
      ],
      input: [valueInfo("ids", 7, [2, 2])],
      output: [valueInfo("y", 1)],
    }, { microsoft: true });
    // Packed: the graph's data is the table's bytes and an f32 scale and zero point a block (the
    // f32 table would be 4.5 MB).
    assert.ok(dataBytes(m) < 1.1 * (q.length + 8 * sc.length), `${dataBytes(m)} B`);
    const { y } = await m.run({
      ids: { data: BigInt64Array.from(ids.map(BigInt)), shape: [2, 2], dtype: "i64" },
    }, { backend, cache: false });
    assert.deepEqual(y.shape, [2, 2, width]);
    assert.deepEqual(numbers(y.data), want, backend);
    m.dispose();
  });
}

/** One MatMulNBits node of 4-bit weights `B` and `scales` (no zero points) over input `a`. */
function nbitsModel(
  { k, n, block, level = 0 }: { k: number; n: number; block: number; level?: number },
  initializer: TensorProto[],
  a: ReturnType<typeof valueInfo>,
) {
  return testModel({
    node: [{
      opType: "MatMulNBits",
      domain: "com.microsoft",
      input: ["a", "B", "scales"],
      output: ["y"],
      attribute: [
        { name: "K", type: 2, i: k },
        { name: "N", type: 2, i: n },
        { name: "bits", type: 2, i: 4 },
        { name: "block_size", type: 2, i: block },
        ...(level ? [{ name: "accuracy_level", type: 2, i: level }] : []),
      ],
    }],
    initializer,
    input: [a],
    output: [valueInfo("y", 1)],
  }, { microsoft: true });
}

Deno.test("a model imported again (another shape, a generation's step) shares its weights' data", () => {
  const [k, n] = [64, 16];
  const m = nbitsModel({ k, n, block: 32 }, [
    u8("B", Array.from({ length: n * 32 }, (_, i) => (i * 37) % 256), [n, 2, 16]),
    f32("scales", Array.from({ length: n * 2 }, (_, i) => 0.01 * (i + 1)), [n * 2]),
  ], valueInfo("a", 1));
  const weights = (rows: number) =>
    m.graph({ a: [rows, k] }).nodes.filter((nd) => nd.op === "Constant")
      .map((nd) => (nd.attrs.value as { data: unknown }).data);
  const [one, three] = [weights(1), weights(3)];
  assert.ok(one.length > 0);
  assert.ok(one.every((d, i) => d === three[i]), "the same arrays");
});

/**
 * MatMulNBits of `accuracy_level` 4 as ONNX Runtime's CPU computes it (MLAS's CompInt8): A is
 * rounded to 8 bits a block of `block_size` (scale = max |a| / 127, a → round(a · (127 /
 * max |a|)) · scale, a block of zeros left 0) before the 4-bit product, on every backend; level 0
 * is the f32 product of A as it is.
 */
Deno.test("MatMulNBits of accuracy_level 4 rounds A to 8 bits a block on every backend", async () => {
  const [k, n, block] = [80, 6, 32], blocks = Math.ceil(k / block), blob = block / 2;
  const q = Array.from({ length: n * blocks * blob }, (_, i) => (i * 73 + 11) % 256);
  const sc = Array.from({ length: n * blocks }, (_, i) => f(0.01 + (i % 5) * 0.003));
  // The second block all zeros; the last one cut short (K = 80).
  const x = Float32Array.from({ length: k }, (_, j) => (j >= 32 && j < 64 ? 0 : Math.sin(j * 1.7)));
  // A block whose 1 / scale and 127 / max |a| differ by an ulp: 0.0220131… · (127 / max) rounds
  // to 3, times 1 / scale to 2. MLAS multiplies by the former.
  [x[0], x[1]] = [1.118267297744751, 0.022013137117028236];
  const rounded = new Float32Array(k);
  for (let b = 0; b < blocks; b++) {
    const part = x.subarray(b * block, Math.min(k, (b + 1) * block));
    const scale = f(Math.max(...part.map(Math.abs)) / 127);
    const inverse = scale === 0 ? 0 : f(127 / Math.max(...part.map(Math.abs)));
    const even = (v: number) => (Math.abs(v % 1) === 0.5 ? 2 * Math.round(v / 2) : Math.round(v));
    part.forEach((v, j) => (rounded[b * block + j] = f(even(f(v * inverse)) * scale)));
  }
  const product = (a: Float32Array) =>
    Array.from({ length: n }, (_, col) => {
      let sum = 0;
      for (let j = 0; j < k; j++) {
        const b = Math.floor(j / block), at = (col * blocks + b) * blob * 2 + (j % block);
        const v = (q[at >> 1] >> (4 * (at & 1))) & 15;
        sum += a[j] * f((v - 8) * sc[col * blocks + b]);
      }
      return sum;
    });
  const model = (level: number) =>
    nbitsModel(
      { k, n, block, level },
      [u8("B", q, [n, blocks, blob]), f32("scales", sc, [n * blocks])],
      valueInfo("a", 1, [1, k]),
    );
  const [plain, int8] = [model(0), model(4)];
  assert.ok(int8.graph().nodes.some((nd) => nd.op === "QuantizeRowBlocks"));
  assert.ok(!plain.graph().nodes.some((nd) => nd.op === "QuantizeRowBlocks"));
  const [wantPlain, wantInt8] = [product(x), product(rounded)];
  assert.ok(wantPlain.some((v, i) => Math.abs(v - wantInt8[i]) > 1e-4), "the rounding shows");
  for (const backend of ["reference", "wasm", "webgpu"]) {
    for (const [m, want] of [[plain, wantPlain], [int8, wantInt8]] as const) {
      const { y } = await m.run({ a: { data: x, shape: [1, k], dtype: "f32" } }, { backend });
      assertClose(numbers(y.data), want, { atol: 2e-5, rtol: 1e-5, message: backend });
    }
  }
  plain.dispose();
  int8.dispose();
});

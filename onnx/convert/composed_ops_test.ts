import assert from "node:assert/strict";
import { KilnError } from "../../jit/support/errors.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { assertClose, numbers } from "../../jit/testing/testing.ts";
import { failingCases } from "../../tools/conformance/conformance.ts";
import { OnnxModel } from "../model.ts";
import { type AttributeProto, encodeModel, tensorOf, type TensorProto } from "../wire/proto.ts";
import "../../mod.ts";

const ints = (name: string, v: number[]): AttributeProto => ({ name, type: 7, ints: v });
const int = (name: string, i: number): AttributeProto => ({ name, type: 2, i });
const str = (name: string, s: string): AttributeProto => ({
  name,
  type: 3,
  s: new TextEncoder().encode(s),
});
const i64 = (name: string, v: number[]): TensorProto => ({
  name,
  dims: [v.length],
  dataType: 7,
  int64Data: v,
});
const f32 = (data: number[], shape: number[]): HostTensor => ({
  data: Float32Array.from(data),
  shape,
  dtype: "f32",
});

/** One node `op` on input x (shape `shape`) with constant inputs `consts`, opset 20. */
function one(
  op: string,
  shape: number[],
  attribute: AttributeProto[],
  consts: TensorProto[] = [],
): OnnxModel {
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 9,
    opsetImport: [{ domain: "", version: 20 }],
    graph: {
      name: "g",
      node: [{ opType: op, input: ["x", ...consts.map((t) => t.name!)], output: ["y"], attribute }],
      initializer: consts,
      input: [{
        name: "x",
        type: { tensorType: { elemType: 1, shape: { dim: shape.map((d) => ({ dimValue: d })) } } },
      }],
      output: [{ name: "y", type: { tensorType: { elemType: 1 } } }],
    },
  }));
}

const ramp = (n: number, f = (i: number) => i) => Array.from({ length: n }, (_, i) => f(i));

/** Window sums of |x|^p over [H, W] planes with zero padding, as LpPool defines them. */
function lpPool(
  x: number[],
  [n, c, h, w]: number[],
  k: number,
  s: number,
  pad: number,
  oh: number,
  ow: number,
  p: number,
) {
  const out: number[] = [];
  for (let b = 0; b < n * c; b++) {
    for (let i = 0; i < oh; i++) {
      for (let j = 0; j < ow; j++) {
        let sum = 0;
        for (let di = 0; di < k; di++) {
          for (let dj = 0; dj < k; dj++) {
            const r = i * s - pad + di, q = j * s - pad + dj;
            if (r >= 0 && r < h && q >= 0 && q < w) sum += Math.abs(x[b * h * w + r * w + q]) ** p;
          }
        }
        out.push(sum ** (1 / p));
      }
    }
  }
  return out;
}

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: Mish, LpPool, AffineGrid, CenterCropPad and Pad's wrap mode`, async () => {
    const run = async (m: OnnxModel, x: HostTensor) => {
      try {
        return numbers((await m.run({ x }, { backend, cache: false })).y.data);
      } finally {
        m.dispose();
      }
    };
    const close = (got: number[], want: number[], message: string) =>
      assertClose(got, want, { atol: 1e-5, rtol: 1e-5, message });

    const xs = [-30, -2, -0.5, 0, 0.5, 2, 19, 30];
    const mish = (v: number) => v * Math.tanh(v > 20 ? v : Math.log1p(Math.exp(v)));
    close(await run(one("Mish", [8], []), f32(xs, [8])), xs.map(mish), "Mish");

    // 5×5 planes, 2×2 windows of stride 2: padding 1, and ceil mode with none (a ragged edge).
    const x = ramp(50, (i) => Math.sin(i) * 3);
    const lp = one("LpPool", [1, 2, 5, 5], [
      ints("kernel_shape", [2, 2]),
      ints("strides", [2, 2]),
      ints("pads", [1, 1, 1, 1]),
    ]);
    close(
      await run(lp, f32(x, [1, 2, 5, 5])),
      lpPool(x, [1, 2, 5, 5], 2, 2, 1, 3, 3, 2),
      "LpPool pads",
    );
    const ceil = one("LpPool", [1, 2, 5, 5], [
      ints("kernel_shape", [2, 2]),
      ints("strides", [2, 2]),
      int("ceil_mode", 1),
      int("p", 3),
    ]);
    close(
      await run(ceil, f32(x, [1, 2, 5, 5])),
      lpPool(x, [1, 2, 5, 5], 2, 2, 0, 3, 3, 3),
      "LpPool ceil",
    );

    // θ of two batch items over a 2×3 grid; rows of the grid are (x, y), x along W.
    const theta = [1, 0, 0, 0, 1, 0, 0.5, -1, 0.25, 2, 0, -0.5];
    for (const align of [0, 1]) {
      const g = one("AffineGrid", [2, 2, 3], [int("align_corners", align)], [
        i64("size", [2, 1, 2, 3]),
      ]);
      const at = (i: number, n: number) => align ? -1 + (2 * i) / (n - 1) : (2 * i + 1) / n - 1;
      const want = [0, 1].flatMap((b) =>
        [0, 1].flatMap((r) =>
          [0, 1, 2].flatMap((q) => {
            const [px, py] = [at(q, 3), at(r, 2)], t = theta.slice(b * 6, b * 6 + 6);
            return [t[0] * px + t[1] * py + t[2], t[3] * px + t[4] * py + t[5]];
          })
        )
      );
      close(await run(g, f32(theta, [2, 2, 3])), want, `AffineGrid align_corners=${align}`);
    }

    // [3, 6] → [5, 4]: rows padded 1 and 1, columns cropped from 1.
    const crop = one("CenterCropPad", [3, 6], [], [i64("shape", [5, 4])]);
    const m = ramp(18, (i) => i + 1);
    const row = (
      r: number,
    ) => (r < 1 || r > 3 ? [0, 0, 0, 0] : m.slice((r - 1) * 6 + 1, (r - 1) * 6 + 5));
    close(await run(crop, f32(m, [3, 6])), ramp(5).flatMap(row), "CenterCropPad");

    // Pad wrap on axis 1 only (axes input): 1 before, 2 after.
    const model = OnnxModel.fromBytes(encodeModel({
      irVersion: 9,
      opsetImport: [{ domain: "", version: 20 }],
      graph: {
        name: "g",
        node: [{
          opType: "Pad",
          input: ["x", "pads", "", "axes"],
          output: ["y"],
          attribute: [str("mode", "wrap")],
        }],
        initializer: [i64("pads", [1, 2]), i64("axes", [1])],
        input: [{
          name: "x",
          type: { tensorType: { elemType: 1, shape: { dim: [{ dimValue: 2 }, { dimValue: 3 }] } } },
        }],
        output: [{ name: "y", type: { tensorType: { elemType: 1 } } }],
      },
    }));
    close(
      await run(model, f32([1, 2, 3, 4, 5, 6], [2, 3])),
      [3, 1, 2, 3, 1, 2, 6, 4, 5, 6, 4, 5],
      "Pad wrap",
    );
  });
}

/** Bitwise ops on i32 and u8 inputs a and b, values computed by JavaScript's operators. */
function bitwise(op: string, elemType: number, arity: number): OnnxModel {
  const input = (name: string) => ({
    name,
    type: { tensorType: { elemType, shape: { dim: [{ dimValue: 4 }] } } },
  });
  return OnnxModel.fromBytes(encodeModel({
    irVersion: 9,
    opsetImport: [{ domain: "", version: 18 }],
    graph: {
      name: "g",
      node: [{ opType: op, input: ["a", "b"].slice(0, arity), output: ["y"], attribute: [] }],
      initializer: [],
      input: ["a", "b"].slice(0, arity).map(input),
      output: [{ name: "y", type: { tensorType: { elemType } } }],
    },
  }));
}

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: BitwiseAnd, Or, Xor and Not on i32 and u8`, async () => {
    const cases = [
      { elemType: 6, a: [12, -1, 0x7fffffff, -8], b: [10, 5, -2, 3], wrap: (v: number) => v | 0 },
      { elemType: 2, a: [12, 255, 128, 7], b: [10, 5, 1, 0], wrap: (v: number) => v & 255 },
    ];
    const ops: [string, (a: number, b: number) => number][] = [
      ["BitwiseAnd", (a, b) => a & b],
      ["BitwiseOr", (a, b) => a | b],
      ["BitwiseXor", (a, b) => a ^ b],
      ["BitwiseNot", (a) => ~a],
    ];
    for (const { elemType, a, b, wrap } of cases) {
      const Data = elemType === 6 ? Int32Array : Uint8Array;
      const dtype = elemType === 6 ? "i32" : "u8";
      for (const [op, f] of ops) {
        const m = bitwise(op, elemType, op === "BitwiseNot" ? 1 : 2);
        const feeds = {
          a: { data: Data.from(a), shape: [4], dtype },
          b: { data: Data.from(b), shape: [4], dtype },
        } as const;
        const out = await m.run(op === "BitwiseNot" ? { a: feeds.a } : feeds, {
          backend,
          cache: false,
        });
        assertClose(numbers(out.y.data), a.map((x, i) => wrap(f(x, b[i]))), {
          atol: 0,
          rtol: 0,
          message: `${op} ${dtype}`,
        });
        m.dispose();
      }
    }
  });
}

/**
 * ONNX's own node cases of GroupNormalization (opset 21, with their `_expanded` function bodies),
 * Col2Im (opset 18: 2-D and 3-D images, strides, dilations, pads), DeformConv (opset 19: padding,
 * a mask and bias, several offset groups) and LpNormalization, written by
 * ONNX 1.23.1's case generators on the GPU machine, expected values from its reference.
 */
const CASES = new URL("../testdata/onnx_newer/", import.meta.url).pathname;

/** A PyTorch export at opset 23 (`testdata/export_norm_fold.py`): nn.GroupNorm and nn.Fold. */
const at = (file: string) => new URL(`../testdata/${file}`, import.meta.url);

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: ONNX's cases of GroupNormalization, Col2Im, DeformConv, LpNormalization`, async () => {
    assert.deepEqual(await failingCases(CASES, backend, 19), []);
  });

  Deno.test(`${backend}: a PyTorch export with GroupNormalization and Col2Im matches ONNX Runtime`, async () => {
    const model = await OnnxModel.load(at("norm_fold_opset23.onnx"));
    const x = new Float32Array(
      (await Deno.readFile(at("norm_fold_opset23.in.x.float32.bin"))).buffer,
    );
    const want = new Float32Array(
      (await Deno.readFile(at("norm_fold_opset23.out.y.float32.bin"))).buffer,
    );
    const out = await model.run({ x: f32([...x], [2, 3, 8, 8]) }, { backend, cache: false });
    const scale = Math.max(...want.map(Math.abs));
    assertClose(numbers(out.y.data), [...want], { atol: 1e-5 * scale, rtol: 0 });
    model.dispose();
  });

  Deno.test(`${backend}: GroupNormalization of opset 18 scales per group; GlobalLpPool`, async () => {
    // [1, 4, 2, 1] in 2 groups: group g's values (x - mean) / sqrt(var + eps) · scale[g] + bias[g].
    const x = [1, 2, 3, 4, -1, 0, 5, 8];
    const scale = { name: "s", dims: [2], dataType: 1, floatData: [2, -1] };
    const bias = { name: "b", dims: [2], dataType: 1, floatData: [0.5, 1] };
    const m = one("GroupNormalization", [1, 4, 2, 1], [int("num_groups", 2)], [scale, bias]);
    const want = [0, 1].flatMap((g) => {
      const v = x.slice(4 * g, 4 * g + 4), mean = v.reduce((a, b) => a + b) / 4;
      const variance = v.reduce((a, b) => a + (b - mean) ** 2, 0) / 4;
      return v.map((e) =>
        (e - mean) / Math.sqrt(variance + 1e-5) * scale.floatData[g] + bias.floatData[g]
      );
    });
    const y = (await m.run({ x: f32(x, [1, 4, 2, 1]) }, { backend, cache: false })).y;
    assertClose(numbers(y.data), want, { atol: 1e-5 });
    m.dispose();
    for (const p of [1, 2, 3]) {
      const pool = one("GlobalLpPool", [1, 2, 2, 2], [int("p", p)]);
      const got = (await pool.run({ x: f32(x, [1, 2, 2, 2]) }, { backend, cache: false })).y;
      assert.deepEqual(got.shape, [1, 2, 1, 1]);
      const norms = [0, 1].map((ch) =>
        x.slice(4 * ch, 4 * ch + 4).reduce((a, b) => a + Math.abs(b) ** p, 0) ** (1 / p)
      );
      assertClose(numbers(got.data), norms, { rtol: 1e-5, message: `p ${p}` });
      pool.dispose();
    }
  });
}

Deno.test("GroupNormalization, DeformConv and Col2Im refuse shapes that do not fit, with a Fix", async () => {
  const params = (n: number) => [
    { name: "s", dims: [n], dataType: 1, floatData: new Array(n).fill(1) },
    { name: "b", dims: [n], dataType: 1, floatData: new Array(n).fill(0) },
  ];
  const refused = async (m: OnnxModel, shape: number[], pattern: RegExp) => {
    await assert.rejects(
      () => m.run({ x: f32(new Array(shape.reduce((a, b) => a * b)).fill(0), shape) }),
      (e) => e instanceof KilnError && pattern.test(e.message) && /Fix:/.test(String(e)),
    );
    m.dispose();
  };
  // 6 channels in 4 groups; then a scale per channel at opset 20 (per group there).
  await refused(
    one("GroupNormalization", [1, 6, 2], [int("num_groups", 4)], params(4)),
    [1, 6, 2],
    /GroupNormalization of \[1,6,2\] in 4 groups/,
  );
  await refused(
    one("GroupNormalization", [1, 6, 2], [int("num_groups", 3)], params(6)),
    [1, 6, 2],
    /scale \[6\]/,
  );
  // A 2×2 kernel over [1, 1, 3, 3] takes offsets of 8 channels, not 4.
  const weights = { name: "w", dims: [1, 1, 2, 2], dataType: 1, floatData: [1, 1, 1, 1] };
  const offsets = { name: "o", dims: [1, 4, 2, 2], dataType: 1, floatData: new Array(16).fill(0) };
  await refused(
    one("DeformConv", [1, 1, 3, 3], [], [weights, offsets]),
    [1, 1, 3, 3],
    /DeformConv of \[1, 1, 3, 3\] with kernel \[1, 1, 2, 2\], offsets \[1, 4, 2, 2\]/,
  );
  // A 4×4 image of 2×2 blocks has 9 of them at stride 1, not 5.
  await refused(
    one("Col2Im", [1, 4, 5], [], [i64("image", [4, 4]), i64("block", [2, 2])]),
    [1, 4, 5],
    /Col2Im of f32 \[1, 4, 5\] into \[4,4\] by blocks \[2,2\]/,
  );
});

/**
 * Opset 21's 4-bit and blocked quantization, as ONNX Runtime's 4-bit quantizer writes QDQ weights:
 * int4 and uint4 initializers dequantized in blocks along either axis (a ragged last block,
 * without zero points) into a MatMul, and a QuantizeLinear to int4 saturating to [-8, 7]; ONNX
 * Runtime Web 1.30's outputs (`bench/export_ms_cases.ts`).
 */
const QDQ4 = new URL("../testdata/onnx_qdq4/", import.meta.url).pathname;

for (const backend of ["reference", "wasm", "webgpu"]) {
  Deno.test(`${backend}: 4-bit blocked QuantizeLinear and DequantizeLinear match ONNX Runtime Web`, async () => {
    assert.deepEqual(await failingCases(QDQ4, backend, 4), []);
  });
}

Deno.test("a 4-bit tensor decodes two values a byte, int4 sign-extended; a short one is refused", () => {
  const t = (dataType: number, raw: number[], dims: number[]) =>
    tensorOf({ name: "w", dims, dataType, rawData: Uint8Array.from(raw) }, "initializer");
  assert.deepEqual([...t(22, [0x8f, 0x07], [3]).data], [-1, -8, 7]);
  assert.deepEqual([...t(21, [0x8f, 0x07], [3]).data], [15, 8, 7]);
  assert.throws(
    () => t(22, [0x12], [3]),
    (e) => e instanceof KilnError && /1 bytes of raw data for 3 int4/.test(e.message),
  );
});

/**
 * Special values (NaN, ±Infinity, ±0, huge and tiny magnitudes) through every op family on every
 * backend, against the reference. WGSL lets a compiler assume there are no NaNs; these cases
 * caught llvmpipe folding `select(x, 0, x < 0)` into `max(x, 0)` (Relu(NaN) = 0); the fuzzer
 * on the H200 caught (x − r) + r folded to x and a padded matmul's 0 · −inf folded to 0.
 */
import type { Attrs } from "../jit/ops/mod.ts";
import type { HostTensor } from "../jit/ir/host_tensor.ts";
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import {
  assertClose,
  assertMatchesReference,
  f32,
  numbers,
  runGraph,
} from "../jit/testing/testing.ts";

const SPECIAL = [NaN, -1, 1, NaN, Infinity, -Infinity, 0, -0, 3e38, 2e38, 0.5, -2.5];
const OTHER = [1, NaN, 2, -Infinity, NaN, 0, -0, 0, Infinity, 1, 0.5, 3];
const x = f32(SPECIAL, [3, 4]), y = f32(OTHER, [3, 4]);
/** Pow's cases: negative bases to odd, even and fractional powers, zeros to either sign, NaNs. */
const BASES = [-2, -2, -2, 0, 0, -0, -0, 4, -Infinity, -Infinity, NaN, -3, -0, -Infinity, 2, -0.5];
const POWERS = [3, 2, 0.5, -1, 2, -3, 0.5, 0.5, 3, 2, 0, -Infinity, 3, 0.5, NaN, Infinity];

const CASES: [op: string, inputs: typeof x[], attrs: Attrs][] = [
  ["Relu", [x], {}],
  ["LeakyRelu", [x], { alpha: 0.1 }],
  ["Clip", [x], { min: -0.5, max: 0.5 }],
  ["HardSigmoid", [x], {}],
  ["HardSwish", [x], {}],
  ["Max", [x, y], {}],
  ["Min", [x, y], {}],
  ["Greater", [x, y], {}],
  ["Less", [x, y], {}],
  ["Equal", [x, x], {}],
  ["GreaterOrEqual", [x, y], {}],
  ["LessOrEqual", [x, y], {}],
  ["IsNaN", [x], {}],
  ["Abs", [x], {}],
  ["Neg", [x], {}],
  ["Sqrt", [x], {}],
  ["Exp", [x], {}],
  ["Log", [x], {}],
  ["Floor", [x], {}],
  ["Ceil", [x], {}],
  ["Round", [x], {}],
  ["Sigmoid", [x], {}],
  ["Tanh", [x], {}],
  ["Add", [x, y], {}],
  ["Mul", [x, y], {}],
  ["Div", [x, y], {}],
  ["Pow", [x, y], {}],
  ["Pow", [f32(BASES, [4, 4]), f32(POWERS, [4, 4])], {}],
  ["Softmax", [x], { axis: -1 }],
  ["ReduceMax", [x], { axes: [1] }],
  ["ReduceMin", [x], { axes: [1] }],
  ["ReduceSum", [x], { axes: [1] }],
  ["ReduceMean", [y], { axes: [0] }],
];

for (const backend of ["wasm", "webgpu"]) {
  Deno.test(`${backend}: NaN, infinities and signed zeros flow through every op as on the reference`, async () => {
    for (const [op, inputs, attrs] of CASES) {
      await assertMatchesReference(backend, op, inputs, attrs, { atol: 1e-6, rtol: 2e-5 });
    }
  });
}

const INT_MIN = -(2 ** 31), INT_MAX = 2 ** 31 - 1;
const tensor = (
  dtype: "i32" | "u32" | "i8" | "u8",
  values: number[],
): HostTensor => ({
  data: { i32: Int32Array, u32: Uint32Array, i8: Int8Array, u8: Uint8Array }[dtype].from(values),
  shape: [values.length],
  dtype,
});
/** Integer divisions by zero, by −1 at the most negative value, and of every sign pairing. */
const DIVIDENDS = {
  i32: [7, -7, 7, -7, 0, INT_MIN, INT_MIN, 5, -5, INT_MAX, 3, -3, INT_MIN],
  u32: [7, 2 ** 32 - 1, 0, 5, 2 ** 31, 9, 2 ** 32 - 1, 1, 6, 0, 3, 8, 2 ** 31 + 5],
  i8: [7, -7, 7, -7, 0, -128, -128, 5, -5, 127, 3, -3, -128],
  u8: [7, 255, 0, 5, 128, 9, 255, 1, 6, 0, 3, 8, 200],
};
const DIVISORS = {
  i32: [2, 2, -2, -2, 3, -1, 1, 0, 0, -1, 0, 7, INT_MIN],
  u32: [2, 16, 3, 0, 3, 0, 2 ** 32 - 1, 2 ** 31, 4, 7, 0, 3, 2 ** 31],
  i8: [2, 2, -2, -2, 3, -1, 1, 0, 0, -1, 0, 7, -128],
  u8: [2, 16, 3, 0, 3, 0, 255, 128, 4, 7, 0, 3, 100],
};
/** Floats past every integer range, NaN, and values that round either way. */
const TO_CAST = [NaN, Infinity, -Infinity, 3e9, -3e9, 2 ** 31, -(2 ** 31), 300, -300, 255.9, -0.9];

for (const backend of ["wasm", "webgpu"]) {
  Deno.test(`${backend}: integer Div and Mod by zero and −1, every sign, saturating Casts and Bitcasts, as on the reference`, async () => {
    const exact = { atol: 0, rtol: 0 };
    for (const dtype of ["i32", "u32", "i8", "u8"] as const) {
      const a = tensor(dtype, DIVIDENDS[dtype]), b = tensor(dtype, DIVISORS[dtype]);
      await assertMatchesReference(backend, "Div", [a, b], {}, exact);
      for (const fmod of [0, 1]) {
        await assertMatchesReference(backend, "Mod", [a, b], { fmod }, exact);
      }
      await assertMatchesReference(backend, "Cast", [f32(TO_CAST)], { to: dtype }, exact);
      // And, Or and Not are bitwise on integers.
      for (const op of ["And", "Or"]) await assertMatchesReference(backend, op, [a, b], {}, exact);
      await assertMatchesReference(backend, "Not", [a], {}, exact);
      if (dtype === "i32" || dtype === "u32") {
        // Bits both ways, subnormals and infinities included (NaN payloads are not kept).
        await assertMatchesReference(backend, "Bitcast", [f32([...TO_CAST.slice(1), 1e-40, -0])], {
          to: dtype,
        }, exact);
        const bits = tensor(dtype, DIVIDENDS[dtype].filter((v) => (v >>> 23 & 255) !== 255));
        await assertMatchesReference(backend, "Bitcast", [bits], { to: "f32" }, exact);
      }
      for (const from of ["i32", "u32"] as const) {
        await assertMatchesReference(backend, "Cast", [tensor(from, DIVIDENDS[from])], {
          to: dtype,
        }, exact);
      }
    }
  });
}

for (const backend of ["wasm", "webgpu"]) {
  Deno.test(`${backend}: f32 division is IEEE's, rounding ties included`, async () => {
    // −0.85000002 / 0.02 lies a hair past a tie; the rest are quotients of scattered values.
    const n = 200, a = [Math.fround(-17 * Math.fround(0.05))], b = [0.02];
    for (let i = 1; i < n; i++) {
      a.push(Math.sin(i * 12.9898) * 43758.5453 % 7);
      b.push(Math.cos(i * 78.233) * 0.37 + (i % 2 ? 0.5 : -0.5));
    }
    await assertMatchesReference(backend, "Div", [f32(a), f32(b)], {}, { atol: 0, rtol: 0 });
  });
}

/** Sums a compiler may reassociate, and products with a padded zero it may fold (fuzz cases). */
function folds() {
  const b = new GraphBuilder();
  const x = b.input("x", [3, 4]), y = b.input("y", [3, 4]);
  const r = b.op("ReduceMin", [x], { axes: [1], keepdims: 1 });
  b.output("sub_add", b.op("Add", [b.op("Sub", [y, r]), r]));
  b.output("add_sub", b.op("Sub", [b.op("Add", [y, x]), x]));
  b.output("sub_sub", b.op("Sub", [y, b.op("Sub", [y, x])]));
  b.output("neg_add", b.op("Add", [b.op("Neg", [x]), b.op("Add", [x, y])]));
  // Row 3 of w is -inf and meets only the padded column of x: 0 · −inf is NaN.
  const w = b.input("w", [5, 2]);
  b.output("pad_mm", b.op("MatMul", [b.op("Pad", [x], { pads: [0, 0, 0, 1] }), w]));
  return b.build();
}

for (const backend of ["wasm", "webgpu"]) {
  Deno.test(`${backend}: specials survive sums a compiler may reassociate and padded products`, async () => {
    const w = f32([1, 2, 3, 4, 5, 6, 7, 8, -Infinity, 1], [5, 2]);
    const feeds = { x: x, y: y, w };
    const want = await runGraph(folds(), feeds);
    const got = await runGraph(folds(), feeds, backend);
    for (const name of Object.keys(want)) {
      assertClose(numbers(got[name].data), numbers(want[name].data), {
        atol: 1e-6,
        rtol: 2e-5,
        message: name,
      });
    }
  });
}

for (const backend of ["wasm", "webgpu"]) {
  Deno.test(`${backend}: a one-element tensor less its squeezed view is NaN at infinities`, async () => {
    // Two loads through different steps of one element: the fuzzer (seed 38004) caught llvmpipe
    // folding the difference to 0, where −inf − (−inf) is NaN.
    const b = new GraphBuilder();
    const n = b.op("Neg", [b.input("x", [1])]);
    b.output("d", b.op("Sub", [n, b.op("Squeeze", [n])]));
    const graph = b.build();
    for (const v of [Infinity, -Infinity, NaN, 2]) {
      const feeds = { x: f32([v], [1]) };
      const want = await runGraph(graph, feeds);
      const got = await runGraph(graph, feeds, backend);
      assertClose(numbers(got.d.data), numbers(want.d.data), { message: `x = ${v}` });
    }
  });
}

for (const backend of ["wasm", "webgpu"]) {
  Deno.test(`${backend}: a Gather of the one index of an axis less its input is NaN at infinities`, async () => {
    // A load with bounds a compiler proves always met: the fuzzer (seed 40002, on the H200's
    // Dawn and llvmpipe alike) caught the difference folded to 0.
    const b = new GraphBuilder();
    const x = b.input("x", [2, 1, 1, 4]);
    const g = b.op("Gather", [x, b.constant(new Int32Array([-1]), [1])], { axis: 2 });
    b.output("d", b.op("Sub", [g, x]));
    const graph = b.build();
    const feeds = { x: f32([1, Infinity, -Infinity, NaN, 2, -3, Infinity, 4], [2, 1, 1, 4]) };
    const want = await runGraph(graph, feeds);
    const got = await runGraph(graph, feeds, backend);
    assertClose(numbers(got.d.data), numbers(want.d.data));
  });
}

import assert from "node:assert/strict";
import { assertClose, f32, numbers, runOp } from "../../jit/testing/testing.ts";
import { uniform } from "../../jit/support/random.ts";

const one = async (op: string, inputs: Parameters<typeof runOp>[1], attrs = {}) =>
  (await runOp(op, inputs, attrs))[0];

Deno.test("MatMul: 2-D, batched with broadcasting, 1-D operands", async () => {
  const a = f32([1, 2, 3, 4, 5, 6], [2, 3]), b = f32([1, 0, 0, 1, 1, 1], [3, 2]);
  assertClose(numbers((await one("MatMul", [a, b])).data), [4, 5, 10, 11]);
  const batched = await one("MatMul", [
    f32([1, 2, 3, 4, 5, 6, 7, 8], [2, 1, 2, 2]),
    f32([1, 0, 0, 1, 2, 0, 0, 2], [2, 2, 2]),
  ]);
  assert.deepEqual(batched.shape, [2, 2, 2, 2]);
  assertClose(numbers(batched.data).slice(0, 8), [1, 2, 3, 4, 2, 4, 6, 8]);
  const mv = await one("MatMul", [a, f32([1, 1, 1])]);
  assert.deepEqual(mv.shape, [2]);
  assertClose(numbers(mv.data), [6, 15]);
  const vm = await one("MatMul", [f32([1, 1]), a]);
  assert.deepEqual(vm.shape, [3]);
  const dot = await one("MatMul", [f32([1, 2]), f32([3, 4])]);
  assert.deepEqual(dot.shape, []);
  assertClose(numbers(dot.data), [11]);
  const empty = await one("MatMul", [f32([], [2, 0]), f32([], [0, 3])]);
  assertClose(numbers(empty.data), [0, 0, 0, 0, 0, 0]);
});

Deno.test("Gemm with transposes, alpha, beta and broadcast C", async () => {
  const a = f32([1, 2, 3, 4, 5, 6], [3, 2]), b = f32([1, 2, 3, 4, 5, 6], [2, 3]);
  const y = await one("Gemm", [a, b, f32([1, 2], [2])], {
    transA: 1,
    transB: 1,
    alpha: 2,
    beta: 10,
  });
  // Aᵀ·Bᵀ = [[22, 49], [28, 64]]
  assertClose(numbers(y.data), [2 * 22 + 10, 2 * 49 + 20, 2 * 28 + 10, 2 * 64 + 20]);
});

Deno.test("a 1024×1024 f32 matmul is within 1e-3 of float64", async () => {
  const n = 1024;
  const a = uniform(n * n, 11), b = uniform(n * n, 12);
  const t0 = performance.now();
  const y = numbers((await one("MatMul", [f32(a, [n, n]), f32(b, [n, n])])).data);
  const ms = performance.now() - t0;
  let worst = 0;
  for (const i of [0, 1, 511, 777, 1023]) {
    for (const j of [0, 3, 512, 1000, 1023]) {
      let s = 0;
      for (let k = 0; k < n; k++) s += a[i * n + k] * b[k * n + j];
      worst = Math.max(worst, Math.abs(y[i * n + j] - s));
    }
  }
  assert.ok(worst <= 1e-3, `max abs error ${worst}`);
  assert.ok(ms < 20_000, `took ${ms} ms`);
});

/** An independent direct convolution (NCHW, groups, stride, pad, dilation). */
function naiveConv(
  x: Float32Array,
  xs: number[],
  w: Float32Array,
  ws: number[],
  o: { stride: number; pad: number; dil: number; group: number },
) {
  const [n, c, h, wd] = xs, [m, cg, kh, kw] = ws;
  const oh = Math.floor((h + 2 * o.pad - o.dil * (kh - 1) - 1) / o.stride) + 1;
  const ow = Math.floor((wd + 2 * o.pad - o.dil * (kw - 1) - 1) / o.stride) + 1;
  const out: number[] = [];
  for (let b = 0; b < n; b++) {
    for (let f = 0; f < m; f++) {
      const g = Math.floor(f / (m / o.group));
      for (let y = 0; y < oh; y++) {
        for (let z = 0; z < ow; z++) {
          let s = 0;
          for (let ci = 0; ci < cg; ci++) {
            for (let i = 0; i < kh; i++) {
              for (let j = 0; j < kw; j++) {
                const r = y * o.stride - o.pad + i * o.dil, q = z * o.stride - o.pad + j * o.dil;
                if (r >= 0 && r < h && q >= 0 && q < wd) {
                  s += x[((b * c + g * cg + ci) * h + r) * wd + q] *
                    w[((f * cg + ci) * kh + i) * kw + j];
                }
              }
            }
          }
          out.push(s);
        }
      }
    }
  }
  return { out, shape: [n, m, oh, ow] };
}

Deno.test("Conv matches a direct convolution across strides, pads, dilations, groups", async () => {
  for (
    const o of [{ stride: 1, pad: 0, dil: 1, group: 1 }, { stride: 2, pad: 1, dil: 1, group: 2 }, {
      stride: 1,
      pad: 2,
      dil: 2,
      group: 4,
    }]
  ) {
    const xs = [2, 4, 7, 6], ws = [4, 4 / o.group, 3, 3];
    const x = uniform(2 * 4 * 7 * 6, 1), w = uniform(ws.reduce((a, b) => a * b), 2);
    const want = naiveConv(x, xs, w, ws, o);
    const y = await one("Conv", [f32(x, xs), f32(w, ws)], {
      strides: [o.stride, o.stride],
      pads: [o.pad, o.pad, o.pad, o.pad],
      dilations: [o.dil, o.dil],
      group: o.group,
    });
    assert.deepEqual(y.shape, want.shape);
    assertClose(numbers(y.data), want.out, { atol: 1e-5 });
  }
  const biased = await one("Conv", [
    f32([1, 2, 3, 4], [1, 1, 2, 2]),
    f32([1], [1, 1, 1, 1]),
    f32([10]),
  ]);
  assertClose(numbers(biased.data), [11, 12, 13, 14]);
  const same = await one("Conv", [
    f32(uniform(25, 3), [1, 1, 5, 5]),
    f32(uniform(9, 4), [1, 1, 3, 3]),
  ], { auto_pad: "SAME_UPPER", strides: [2, 2] });
  assert.deepEqual(same.shape, [1, 1, 3, 3]);
});

Deno.test("MaxPool and AveragePool with pads, strides, ceil_mode, count_include_pad", async () => {
  const x = f32([...Array(16).keys()], [1, 1, 4, 4]);
  const mp = await one("MaxPool", [x], { kernel_shape: [2, 2], strides: [2, 2] });
  assert.deepEqual(mp.shape, [1, 1, 2, 2]);
  assertClose(numbers(mp.data), [5, 7, 13, 15]);
  const ap = await one("AveragePool", [x], { kernel_shape: [2, 2], strides: [2, 2] });
  assertClose(numbers(ap.data), [2.5, 4.5, 10.5, 12.5]);
  const padded = await one("AveragePool", [x], {
    kernel_shape: [3, 3],
    strides: [3, 3],
    pads: [1, 1, 1, 1],
  });
  assertClose(numbers(padded.data), [
    (0 + 1 + 4 + 5) / 4,
    (2 + 3 + 6 + 7) / 4,
    (8 + 9 + 12 + 13) / 4,
    (10 + 11 + 14 + 15) / 4,
  ]);
  const incl = await one("AveragePool", [x], {
    kernel_shape: [3, 3],
    strides: [3, 3],
    pads: [1, 1, 1, 1],
    count_include_pad: 1,
  });
  assertClose(numbers(incl.data), [10 / 9, 18 / 9, 42 / 9, 50 / 9]);
  const ceil = await one("MaxPool", [f32([...Array(25).keys()], [1, 1, 5, 5])], {
    kernel_shape: [2, 2],
    strides: [2, 2],
    ceil_mode: 1,
  });
  assert.deepEqual(ceil.shape, [1, 1, 3, 3]);
  assertClose(numbers(ceil.data), [6, 8, 9, 16, 18, 19, 21, 23, 24]);
});

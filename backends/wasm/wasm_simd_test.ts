import assert from "node:assert/strict";
import { erf } from "../reference/scalar_math.ts";
import { compile, setMemoryBudget } from "../../mod.ts";
import { GraphBuilder, type Sym } from "../../jit/frontend/graph_builder.ts";
import {
  assertClose,
  assertMatchesReference,
  f32,
  numbers,
  runGraph,
  runOp,
} from "../../jit/testing/testing.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { Attrs } from "../../jit/ops/mod.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { WasmBackend } from "./wasm_backend.ts";
import {
  batchesOfB,
  indirectionFill,
  packBlockRows,
  packsA,
  packsOf,
  prepackBytes,
  rowsOfA,
  tableRows,
  type TableTaps,
  tableTaps,
} from "../../shaders/wasm/matmul_plan.ts";

const wasm = new WasmBackend();
await wasm.prepare();

/** Runs `op` on wasm; returns its f32 output as numbers. */
async function onWasm(op: string, inputs: HostTensor[], attrs: Attrs = {}): Promise<number[]> {
  const [out] = await runOp(op, inputs, attrs, { backend: wasm });
  return numbers(out.data);
}

/** Max relative error of `got` against float64 `want` over normal f32 results. */
function maxRelError(xs: Float32Array, got: number[], want: (x: number) => number): number {
  let worst = 0;
  for (let i = 0; i < xs.length; i++) {
    const w = want(xs[i]);
    if (!Number.isFinite(w) || Math.abs(w) < 2 ** -126) continue;
    worst = Math.max(worst, Math.abs(got[i] - w) / Math.abs(w));
  }
  return worst;
}

const SPECIAL = [NaN, Infinity, -Infinity, 0, -0];

Deno.test("vector exp, log and erf stay within 2e-6 relative error and get special values right", async () => {
  const sweep = (lo: number, hi: number, n: number) =>
    Float32Array.from({ length: n }, (_, i) => lo + (hi - lo) * i / (n - 1));
  const expX = sweep(-103.9, 88.7, 200_003);
  assert.ok(maxRelError(expX, await onWasm("Exp", [f32(expX)]), Math.exp) <= 2e-6);
  // log over every binade, subnormals included.
  const logX = Float32Array.from(
    { length: 277 * 97 },
    (_, i) => 2 ** (Math.floor(i / 97) - 149) * (1 + (i % 97) / 97),
  );
  assert.ok(maxRelError(logX, await onWasm("Log", [f32(logX)]), Math.log) <= 2e-6);
  const erfX = sweep(-6, 6, 120_001);
  assert.ok(maxRelError(erfX, await onWasm("Erf", [f32(erfX)]), erf) <= 2e-6);

  const subnormal = await onWasm("Exp", [f32([-100, -103])]);
  assertClose(subnormal, [Math.fround(Math.exp(-100)), Math.fround(Math.exp(-103))], {
    rtol: 1e-3,
  });
  assert.deepEqual(await onWasm("Exp", [f32(SPECIAL)]), [NaN, Infinity, 0, 1, 1]);
  assert.deepEqual(await onWasm("Exp", [f32([89, -104])]), [Infinity, 0]);
  assert.deepEqual(await onWasm("Log", [f32([...SPECIAL, -1, 1])]), [
    NaN,
    Infinity,
    NaN,
    -Infinity,
    -Infinity,
    NaN,
    0,
  ]);
  assert.deepEqual(await onWasm("Erf", [f32(SPECIAL)]), [NaN, 1, -1, 0, -0]);
});

Deno.test("vector sin and cos stay within 2e-6 relative error, near multiples of π too", async () => {
  const near = Array.from({ length: 4000 }, (_, i) => {
    const x = Math.fround(((i >> 2) + 1) * Math.PI / 2);
    const ulp = Math.fround(x * (1 + 2 ** -23)) - x;
    return x + ((i & 3) - 1.5) * 2 * ulp;
  });
  const xs = Float32Array.from([
    ...near,
    ...near.map((x) => -x),
    ...Array.from({ length: 200_001 }, (_, i) => (i - 100_000) * 0.001),
    ...Array.from({ length: 40_001 }, (_, i) => (i - 20_000) * 52.4287),
    ...Array.from({ length: 200 }, (_, i) => 2 ** (i / 8) * 1e-3),
  ]);
  for (const [op, f] of [["Sin", Math.sin], ["Cos", Math.cos]] as const) {
    const err = maxRelError(xs, await onWasm(op, [f32(xs)]), f);
    assert.ok(err <= 2e-6, `${op}: ${err}`);
  }
  // Beyond 2^20 and for non-finite inputs the lanes call the host.
  const big = [3e9, -1e30, 1048577.5];
  assert.deepEqual(await onWasm("Sin", [f32([...big, ...SPECIAL])]), [
    ...big.map((x) => Math.fround(Math.sin(Math.fround(x)))),
    NaN,
    NaN,
    NaN,
    0,
    -0,
  ]);
  assert.deepEqual(await onWasm("Cos", [f32([NaN, Infinity, 0, -0])]), [NaN, NaN, 1, 1]);
});

/** Inputs in [-2, 2) from a fixed LCG, with a NaN and infinities when `special`. */
function data(n: number, seed: number, special = false): Float32Array {
  const out = new Float32Array(n);
  let s = seed;
  for (let i = 0; i < n; i++) {
    s = (s * 1664525 + 1013904223) >>> 0;
    out[i] = (s / 2 ** 32) * 4 - 2;
  }
  if (special && n >= 3) [out[0], out[1], out[n - 1]] = [NaN, Infinity, -Infinity];
  return out;
}

Deno.test("linear and vector paths match the reference at sizes 0 to 1000, broadcast, transposed and sliced", async () => {
  const compare = (op: string, inputs: HostTensor[], attrs: Attrs = {}) =>
    assertMatchesReference(wasm, op, inputs, attrs, { atol: 1e-6, rtol: 2e-6 });
  for (const n of [0, 1, 3, 4, 5, 17, 1000]) {
    const x = f32(data(n, n + 1, true));
    for (const op of ["Sigmoid", "Tanh", "Relu", "Exp", "Abs", "Floor", "Gelu", "IsNaN"]) {
      await compare(op, [x]);
    }
    await compare("Add", [x, f32([0.5])]);
    await compare("Where", [
      { ...x, dtype: "bool", data: Uint8Array.from(data(n, 7), (v) => (v > 0 ? 1 : 0)) },
      x,
      f32([3]),
    ]);
    // Rows of n: broadcasting along either axis, reductions over the last and the first axis.
    const m = f32(data(3 * n, n + 2, true), [3, n]);
    await compare("Mul", [m, f32(data(n, 5), [n])]);
    await compare("Sub", [m, f32(data(3, 6), [3, 1])]);
    await compare("Transpose", [m], { perm: [1, 0] });
    // A bool selector broadcast along rows (one word a row) and concatenations (the walk of a
    // row takes one source, chosen by a bool selector: four points at a time).
    const rows = { data: Uint8Array.from([1, 0, 1]), shape: [3, 1], dtype: "bool" as const };
    await compare("Where", [rows, m, f32([2])]);
    await compare("Concat", [m, f32(data(2 * n, n + 8), [2, n])], { axis: 0 });
    await compare("Concat", [f32(data(2 * n, n + 9), [2, 1, n]), f32(data(4 * n, n), [2, 2, n])], {
      axis: 1,
    });
    await compare("Slice", [m], { starts: [0, -1], ends: [3, -2147483648], steps: [1, -1] });
    for (const op of ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean"]) {
      await compare(op, [m], { axes: [1] });
      await compare(op, [m], { axes: [0] });
    }
    await compare("Softmax", [f32(data(3 * n, n + 3), [3, n])], { axis: -1 });
    await compare("Softmax", [m], { axis: 0 });
    if (n > 0) {
      await compare("LayerNormalization", [f32(data(3 * n, n + 4), [3, n]), f32(data(n, 9))], {
        axis: -1,
      });
    }
  }
});

Deno.test("row reductions: a NaN in any lane sticks, LayerNorm's moments hold far from zero, small windows unroll", async () => {
  const compare = (op: string, inputs: HostTensor[], attrs: Attrs = {}) =>
    assertMatchesReference(wasm, op, inputs, attrs, { atol: 1e-5, rtol: 1e-5 });
  for (const n of [5, 8, 17, 1000]) {
    for (const at of [1, 2, 3, n - 1]) {
      const x = data(2 * n, n);
      x[at] = NaN;
      x[n + at] = at % 2 ? Infinity : -Infinity;
      for (const op of ["ReduceMax", "ReduceMin"]) {
        await compare(op, [f32(x, [2, n])], { axes: [1] });
      }
      await compare("Softmax", [f32(x, [2, n])], { axis: -1 });
      await compare("LayerNormalization", [f32(x, [2, n]), f32(data(n, 3))], { axis: -1 });
    }
    // Mean 1000, spread 2: Σx² - 2aΣx + n·a² cancels 24 bits, which f64 has to spare.
    const far = data(4 * n, n + 1).map((v) => v + 1000);
    await compare("LayerNormalization", [f32(far, [4, n]), f32(data(n, 4))], { axis: -1 });
    const flat = new Float32Array(3 * n).fill(-7.25);
    await compare("LayerNormalization", [f32(flat, [3, n]), f32(data(n, 5))], { axis: -1 });
  }
  // Small windows that no single stride walks run unrolled: pools, reductions over split axes.
  const img = data(2 * 3 * 9 * 9, 7);
  img[40] = NaN;
  for (const k of [2, 3, 4, 5]) {
    for (const op of ["MaxPool", "AveragePool"]) {
      await compare(op, [f32(img, [2, 3, 9, 9])], { kernel_shape: [k, k], strides: [2, 1] });
    }
  }
  for (const axes of [[1, 3], [0, 2]]) {
    for (const op of ["ReduceSum", "ReduceMax", "ReduceMean"]) {
      await compare(op, [f32(img.subarray(0, 120), [2, 3, 4, 5])], { axes });
    }
  }
  const got = await onWasm("ReduceMax", [f32([-1, -2, -3, -4, 5, 6, NaN, 8], [1, 8])], {
    axes: [1],
  });
  assert.ok(Number.isNaN(got[0]), `max over a row with a NaN is NaN, got ${got[0]}`);
});

Deno.test("tiled matmul matches the reference at every tile remainder, with epilogues and batches", async () => {
  const close = (op: string, inputs: HostTensor[], attrs: Attrs = {}) =>
    assertMatchesReference(wasm, op, inputs, attrs, { atol: 1e-5, rtol: 1e-5 });
  for (
    const [mm, nn, kk] of [
      [1, 8, 3],
      [3, 9, 5],
      [4, 8, 1],
      [5, 17, 7],
      [9, 33, 16],
      [6, 7, 4],
      [8, 9, 7],
      [14, 16, 9],
    ]
  ) {
    const a = f32(data(mm * kk, mm + kk), [mm, kk]);
    const b = f32(data(kk * nn, nn + 1), [kk, nn]);
    await close("MatMul", [a, b]);
    await close("Gemm", [a, b, f32(data(nn, 3), [nn])], { alpha: 0.5, beta: 2 });
    await close("Gemm", [a, f32(data(kk * nn, nn + 2), [nn, kk]), f32([1])], { transB: 1 });
    await close("MatMul", [f32(data(2 * mm * kk, 4), [2, mm, kk]), b]);
    await close("MatMul", [
      f32(data(2 * mm * kk, 5), [2, mm, kk]),
      f32(data(2 * kk * nn, 6), [2, kk, nn]),
    ]);
  }
  await close("MatMul", [f32([], [3, 0]), f32([], [0, 8])]);
});

Deno.test("matmuls whose B changes per run (inputs, another matmul's product) repack it every run", async () => {
  // Three tiled matmuls share one place for their packed B: b1 and d are inputs, q a product.
  const b = new GraphBuilder();
  const p = b.op("MatMul", [b.input("a", [4, 9]), b.input("b1", [9, 17])]);
  const q = b.op("MatMul", [b.input("c", [17, 6]), b.input("d", [6, 10])]);
  b.output("y", b.op("MatMul", [p, q]));
  const graph = b.build();
  const [exe, ref] = await Promise.all([
    compile(graph, { backend: wasm }),
    compile(graph, { backend: "reference" }),
  ]);
  try {
    for (const seed of [1, 2, 3]) {
      const inputs = {
        a: f32(data(36, seed), [4, 9]),
        b1: f32(data(153, seed + 10), [9, 17]),
        c: f32(data(102, seed + 20), [17, 6]),
        d: f32(data(60, seed + 30), [6, 10]),
      };
      const [got, want] = await Promise.all([exe.run(inputs), ref.run(inputs)]);
      assertClose(numbers(got.y.data), numbers(want.y.data), {
        atol: 1e-4,
        rtol: 1e-5,
        message: `inputs ${seed}`,
      });
    }
  } finally {
    exe.dispose();
    ref.dispose();
  }
});

Deno.test("weights are packed once and again after setParam, on every thread, transposed or not", async () => {
  const gemm = (m: number, transB: number) => {
    const [k, n] = [64, 20];
    const b = new GraphBuilder();
    const x = b.input("x", [m, k]);
    const w = b.param("w", transB ? [n, k] : [k, n], "f32", data(k * n, 3));
    b.output("y", b.op("Relu", [b.op("Gemm", [x, w, b.constant(data(n, 4), [n])], { transB })]));
    return { graph: b.build(), x: f32(data(m * k, 5), [m, k]), size: k * n };
  };
  // A convolution's weights are its B, packed beside its patches' indirection table.
  const conv = (batch: number) => {
    const b = new GraphBuilder();
    const x = b.input("x", [batch, 3, 20, 20]);
    const w = b.param("w", [8, 3, 3, 3], "f32", data(8 * 27, 3));
    b.output("y", b.op("Conv", [x, w], { pads: [1, 1, 1, 1] }));
    return { graph: b.build(), x: f32(data(batch * 1200, 5), [batch, 3, 20, 20]), size: 8 * 27 };
  };
  const cases = [gemm(1, 0), gemm(7, 1), gemm(600, 0), gemm(601, 1), conv(1), conv(2)];
  for (const [i, { graph, x, size }] of cases.entries()) {
    const [exe, ref] = await Promise.all([
      compile(graph, { backend: wasm }),
      compile(graph, { backend: "reference" }),
    ]);
    try {
      const inputs = { x };
      const check = async (label: string) => {
        const [got, want] = await Promise.all([exe.run(inputs), ref.run(inputs)]);
        assertClose(numbers(got.y.data), numbers(want.y.data), {
          atol: 1e-5,
          rtol: 1e-5,
          message: `case ${i}: ${label}`,
        });
      };
      await check("first run");
      // The pool's workers start after the first run's task; later runs split the rows.
      await new Promise((r) => setTimeout(r, 300));
      await check("threaded run");
      for (const e of [exe, ref]) e.setParam("w", data(size, 6));
      await check("after setParam");
      await check("again");
    } finally {
      exe.dispose();
      ref.dispose();
    }
  }
});

Deno.test("convolutions as implicit GEMM: padding, strides, dilation, groups, fills, epilogues", async () => {
  const close = (op: string, inputs: HostTensor[], attrs: Attrs = {}) =>
    assertMatchesReference(wasm, op, inputs, attrs, { atol: 1e-4, rtol: 1e-5 });
  const x = (n: number, c: number, h: number, w: number, seed: number) =>
    f32(data(n * c * h * w, seed), [n, c, h, w]);
  const w = (m: number, c: number, k: number, seed: number) =>
    f32(data(m * c * k * k, seed), [m, c, k, k]);
  // Fewer than 8 filters (scalar columns) and more (register tiles with a remainder).
  for (const m of [3, 12]) {
    await close("Conv", [x(3, 2, 9, 7, 1), w(m, 2, 3, 2), f32(data(m, 3))], { pads: [1, 2, 1, 0] });
    await close("Conv", [x(2, 3, 11, 10, 4), w(m, 3, 3, 5)], {
      strides: [2, 3],
      dilations: [2, 1],
    });
    await close("Conv", [x(1, 2, 6, 6, 6), w(m, 2, 1, 7)], {});
  }
  await close("Conv", [x(2, 4, 7, 7, 8), w(6, 2, 3, 9), f32(data(6, 10))], {
    group: 2,
    pads: [1, 1, 1, 1],
  });
  // A padded input of fill 0.5 read through the conv's own zero padding: two fills, so the
  // gather follows the index map instead of the indirection table.
  const b = new GraphBuilder();
  const xi = b.input("x", [1, 2, 6, 6]);
  const padded = b.op("Pad", [xi], { pads: [0, 0, 1, 1, 0, 0, 1, 1], value: 0.5 });
  const conv = b.op("Conv", [padded, b.input("w", [9, 2, 3, 3])], { pads: [1, 1, 1, 1] });
  b.output("y", b.op("Relu", [conv]));
  const graph = b.build();
  const feeds = { x: x(1, 2, 6, 6, 11), w: w(9, 2, 3, 12) };
  const [want, got] = await Promise.all(
    ["reference", wasm].map((backend) => runGraph(graph, feeds, backend)),
  );
  assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-4, rtol: 1e-5 });
});

Deno.test("a convolution's indirection table is built by its packing call, not carried in the module", async () => {
  // 4096 rows of 144 patch elements: a 2.4 MB table, which the module once held as data.
  const b = new GraphBuilder();
  const x = b.input("x", [1, 16, 64, 64]);
  const w = b.param("w", [16, 16, 3, 3], "f32", data(16 * 144, 2));
  b.output("y", b.op("Conv", [x, w], { pads: [1, 1, 1, 1] }));
  const graph = b.build();
  const [conv] = fuse(graph).kernels;
  assert(packsA(conv) && indirectionFill(conv) === 0);
  const bytes = await wasm.codegen.generate(conv) as Uint8Array<ArrayBuffer>;
  assert(bytes.byteLength < 32_768, `module of ${bytes.byteLength} bytes`);
  // The module declares what its packing needs, so that a program from the disk cache lays out
  // its arena without working the table out again.
  assert.deepEqual(packsOf(new WebAssembly.Module(bytes)), {
    bytes: Math.ceil(prepackBytes(conv) / 16) * 16,
    tableRows: 4096,
  });
  assert.equal(tableRows(conv), 4096);
  const feeds = { x: f32(data(16 * 4096, 3), [1, 16, 64, 64]) };
  const [want, got] = await Promise.all(
    ["reference", wasm].map((backend) => runGraph(graph, feeds, backend)),
  );
  assertClose(numbers(got.y.data), numbers(want.y.data), { atol: 1e-4, rtol: 1e-5 });
});

/**
 * `graph` on one wasm thread, and compiled on `threaded` (run, its workers let come up, run
 * twice), gives what the reference gives within `atol`.
 */
async function assertThreadedLikeReference(
  name: string,
  graph: Graph,
  feeds: Record<string, HostTensor>,
  threaded: WasmBackend,
  atol: number,
) {
  const want = await runGraph(graph, feeds, "reference");
  using exe = await compile(graph, { backend: threaded, cache: false });
  await exe.run(feeds);
  await new Promise((r) => setTimeout(r, 300));
  const runs = [await runGraph(graph, feeds, wasm), await exe.run(feeds), await exe.run(feeds)];
  for (const got of runs) {
    assertClose(numbers(got.y.data), numbers(want.y.data), { atol, rtol: 1e-5, message: name });
  }
}

Deno.test("convolutions past the packing limit pack a block of rows at a time; tables factor into taps", async () => {
  type Case = {
    name: string;
    x: number[];
    w: number[];
    attrs: Attrs;
    /** A Pad of fill 0.5 before the conv (two fills: no table, the index map gathers). */
    pad?: boolean;
    blocks: number;
    taps?: TableTaps;
  };
  const cases: Case[] = [
    // 4608-long patches (512 channels, 3×3): 227 rows a block, 256 rows.
    {
      name: "3×3 over 512 channels",
      x: [1, 512, 16, 16],
      w: [8, 512, 3, 3],
      attrs: { pads: [1, 1, 1, 1] },
      blocks: 2,
      taps: { taps: 9, channels: 512, stride: 256, lines: { length: 3, stride: 16 } },
    },
    {
      name: "the same, padded with 0.5 first",
      x: [1, 512, 16, 16],
      w: [8, 512, 3, 3],
      attrs: { pads: [1, 1, 1, 1] },
      pad: true,
      blocks: 2,
    },
    // A stem: 49 taps, each row's in locals; 64 taps, walked from the table.
    ...[7, 8].map((side): Case => ({
      name: `${side}×${side} stride 2`,
      x: [2, 3, 30, 31],
      w: [10, 3, side, side],
      attrs: { pads: [3, 3, 3, 3], strides: [2, 2] },
      blocks: 1,
      taps: { taps: side * side, channels: 3, stride: 930, lines: { length: side, stride: 31 } },
    })),
    // In-bounds rows copy kernel rows as vectors: of 1, 2, 3 (one element past, but the
    // last copy), 4 and 5 elements; the last pixel reads the input's last element. A dilated
    // width does not read consecutive elements; a dilated height reads rows further apart.
    ...([[3, 1], [1, 3], [2, 2], [4, 4], [5, 5], [3, 3, 2, 1], [3, 3, 1, 2]] as const).map(
      ([kh, kw, dh = 1, dw = 1]): Case => ({
        name: `${kh}×${kw} dilated ${dh}×${dw}`,
        x: [2, 5, 11, 13],
        w: [9, 5, kh, kw],
        attrs: { dilations: [dh, dw] },
        blocks: 1,
        taps: {
          taps: kh * kw,
          channels: 5,
          stride: 143,
          ...(dw === 1 && { lines: { length: kw, stride: kh > 1 ? 13 * dh : 0 } }),
        },
      }),
    ),
  ];
  const threaded = new WasmBackend({ threads: 2 });
  for (const { name, x: xs, w: ws, attrs, pad, blocks, taps } of cases) {
    const b = new GraphBuilder();
    let x = b.input("x", xs);
    if (pad) x = b.op("Pad", [x], { pads: [0, 0, 1, 1, 0, 0, 1, 1], value: 0.5 });
    const w = b.param("w", ws, "f32", data(ws.reduce((p, d) => p * d), 21));
    b.output("y", b.op("Relu", [b.op("Conv", [x, w], attrs)]));
    const graph = b.build();
    const [conv] = fuse(graph).kernels;
    const rows = rowsOfA(conv, ws[0]);
    assert(packsA(conv) && Math.ceil(rows / packBlockRows(conv)) === blocks, name);
    assert.deepEqual(tableTaps(conv), taps, name);
    assert.equal(indirectionFill(conv) === 0, !pad, name);
    const feeds = { x: f32(data(xs.reduce((p, d) => p * d), 22), xs) };
    // Sums of 4608 products in another order: 1e-4 of the outputs' scale (about 30).
    await assertThreadedLikeReference(name, graph, feeds, threaded, 3e-3);
  }
  threaded.dispose();
});

Deno.test("a B that changes with the batch tiles a panel set a batch: grouped convs, attention's matmuls", async () => {
  const threaded = new WasmBackend({ threads: 2 });
  type Build = (b: GraphBuilder, x: Sym, y: Sym) => Sym;
  const cases: [string, HostTensor[], Build][] = [
    // RegNet's groups of 8 (one panel each) and 12 filters (a narrower last panel); 2 images
    // of 11×13 pixels (batches of 143 rows, not whole tiles), the second image packing again.
    ...[8, 12].map((mg): [string, HostTensor[], Build] => [
      `grouped conv, ${mg} filters a group`,
      [f32(data(2 * 40 * 143, 30), [2, 40, 11, 13]), f32(data(5 * mg * 72, 31), [5 * mg, 8, 3, 3])],
      (b, x, y) => b.op("Conv", [x, y], { group: 5, pads: [1, 1, 1, 1] }),
    ]),
    // Heads' weights·V (B's columns contiguous) and scores Q·Kᵀ (B's columns strided).
    [
      "weights·V",
      [f32(data(6 * 19 * 16, 32), [2, 3, 19, 16]), f32(data(6 * 16 * 21, 33), [2, 3, 16, 21])],
      (b, x, y) => b.op("MatMul", [x, y]),
    ],
    [
      "Q·Kᵀ",
      [f32(data(6 * 19 * 16, 34), [2, 3, 19, 16]), f32(data(6 * 21 * 16, 35), [2, 3, 21, 16])],
      (b, x, y) => b.op("MatMul", [x, b.op("Transpose", [y], { perm: [0, 1, 3, 2] })]),
    ],
  ];
  // Swin's shifted windows: the scores plus a mask per window, read through a batch axis split
  // into images and windows (no pointer walks that along n: the epilogue runs point by point).
  const mask = f32(data(2 * 21 * 21, 36), [2, 1, 21, 21]);
  cases.push([
    "Q·Kᵀ + a mask through a split batch axis",
    [f32(data(6 * 21 * 16, 37), [6, 21, 16]), f32(data(6 * 21 * 16, 38), [6, 21, 16])],
    (b, x, y) => {
      const scores = b.op("MatMul", [x, b.op("Transpose", [y], { perm: [0, 2, 1] })]);
      const windows = b.op("Reshape", [scores], { shape: [2, 3, 21, 21] });
      const masked = b.op("Add", [windows, b.constant(mask.data as Float32Array, mask.shape)]);
      return b.op("Reshape", [masked], { shape: [6, 21, 21] });
    },
  ]);
  for (const [name, inputs, build] of cases) {
    const b = new GraphBuilder();
    const [x, y] = inputs.map((t, i) => b.input(`x${i}`, t.shape));
    b.output("y", build(b, x, y));
    const graph = b.build();
    const [kernel] = fuse(graph).kernels;
    assert(batchesOfB(kernel) > 1, name);
    const bytes = await wasm.codegen.generate(kernel) as Uint8Array<ArrayBuffer>;
    const module = new WebAssembly.Module(bytes);
    assert.deepEqual(
      packsOf(module),
      { bytes: Math.ceil(prepackBytes(kernel) / 16) * 16, tableRows: tableRows(kernel) },
      `${name}: tiled`,
    );
    const feeds = Object.fromEntries(inputs.map((t, i) => [`x${i}`, t]));
    await assertThreadedLikeReference(name, graph, feeds, threaded, 1e-4);
  }
  threaded.dispose();
});

Deno.test("large kernels give the same results with threads on and off", async () => {
  const serial = new WasmBackend({ threads: 1 }), threaded = new WasmBackend({ threads: 2 });
  await Promise.all([serial.prepare(), threaded.prepare()]);
  assert.equal(threaded.capabilities().threads, 2);
  const n = (1 << 18) + 3;
  const cases: [string, HostTensor[], Attrs][] = [
    ["Gelu", [f32(data(n, 1))], {}],
    ["Softmax", [f32(data(300 * 1000, 2), [300, 1000])], { axis: -1 }],
    ["ReduceSum", [f32(data(300 * 1000, 3), [300, 1000])], { axes: [1] }],
    ["Gemm", [
      f32(data(130 * 256, 4), [130, 256]),
      f32(data(256 * 72, 5), [256, 72]),
      f32(data(72, 6)),
    ], {}],
    ["Conv", [
      f32(data(2 * 8 * 40 * 40, 7), [2, 8, 40, 40]),
      f32(data(16 * 8 * 3 * 3, 8), [16, 8, 3, 3]),
    ], { pads: [1, 1, 1, 1] }],
  ];
  for (const [op, inputs, attrs] of cases) {
    const b = new GraphBuilder();
    b.output("y", b.op(op, inputs.map((t, i) => b.input(`x${i}`, t.shape, t.dtype)), attrs));
    const graph = b.build();
    const feeds = Object.fromEntries(inputs.map((t, i) => [`x${i}`, t]));
    const [want, one] = await Promise.all(
      ["reference", serial].map((backend) => runGraph(graph, feeds, backend)),
    );
    using exe = await compile(graph, { backend: threaded });
    // The crew starts in the background: run, let the workers come up, run again.
    const first = await exe.run(feeds);
    await new Promise((r) => setTimeout(r, 300));
    const again = await exe.run(feeds);
    for (const got of [one, first, again]) {
      assertClose(numbers(got.y.data), numbers(want.y.data), {
        atol: 1e-4,
        rtol: 1e-5,
        message: op,
      });
    }
  }
  assert.throws(() => new WasmBackend({ threads: 0 }), /threads must be a positive integer/);
  // A misspelt option had been ignored (all the cores' threads where one was asked for).
  assert.throws(
    () => new WasmBackend({ thread: 1 } as never),
    /WasmBackend has no option "thread"/,
  );
  assert.throws(() => new WasmBackend(4 as never), /takes an object of options/);
});

Deno.test("a program beyond 4 GiB of buffers is refused with a clear error", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Neg", [b.input("x", [2 ** 29, 2])]));
  // The default memory budget refuses the 4 GiB tensor first; past a raised budget, wasm does.
  assert.throws(() => b.build(), /memory budget/);
  setMemoryBudget({ maxTensorBytes: 2 ** 33 });
  try {
    await assert.rejects(
      compile(b.build(), { backend: wasm, cache: false }),
      /WebAssembly addresses at most 4 GiB[\s\S]*Fix: run it on the webgpu or reference backend/,
    );
  } finally {
    setMemoryBudget(undefined);
  }
});

/**
 * Integer convolutions on wasm run the integer tiles over their patches, gathered as the f32
 * tiles gather theirs (through a factored or a whole indirection table, or A's index map) and
 * narrowed to i16 pairs: exact against the reference, with two threads as with one.
 *
 * @module
 */
import assert from "node:assert/strict";
import { compile, GraphBuilder } from "../../mod.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import type { KernelIR } from "../../jit/ir/kernel_ir.ts";
import { uniform } from "../../jit/support/random.ts";
import { numbers, runGraph } from "../../jit/testing/testing.ts";
import { counterValues } from "../../jit/runtime/counters.ts";
import { KernelCache, tuningNoteOf } from "../../jit/runtime/kernel_cache.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import { WasmBackend } from "../../backends/wasm/wasm_backend.ts";
import {
  indirectionFill,
  integerPlan,
  packBlockRows,
  packsA,
  packsOf,
  rowsOfA,
  tableTaps,
} from "./matmul_plan.ts";

/** A ConvInteger case: shapes, attributes and how its patches are gathered. */
interface Case {
  readonly x: number[];
  readonly w: number[];
  readonly attrs?: Record<string, number | number[]>;
  /** How A is read: packed through a factored table, a whole one or the index map; in place. */
  readonly gather: "taps" | "table" | "index map" | "in place";
  /** Blocks of rows a call packs. */
  readonly blocks?: number;
  /** The i32 sums scaled to f32 after (the tiles' vector epilogue), else stored as they are. */
  readonly dequantize?: boolean;
  /** Too little work for the program to split among threads. */
  readonly oneThread?: boolean;
}

const CASES: Record<string, Case> = {
  "3×3 over 64 channels, padded": {
    x: [1, 64, 9, 9],
    w: [24, 64, 3, 3],
    attrs: { pads: [1, 1, 1, 1] },
    gather: "taps",
    dequantize: true,
  },
  // 4608-long patches: 227 rows a block of 256.
  "3×3 over 512 channels": {
    x: [1, 512, 16, 16],
    w: [8, 512, 3, 3],
    attrs: { pads: [1, 1, 1, 1] },
    gather: "taps",
    blocks: 2,
  },
  "1×1 stride 2, two images": {
    x: [2, 32, 10, 10],
    w: [16, 32, 1, 1],
    attrs: { strides: [2, 2] },
    gather: "taps",
    dequantize: true,
  },
  // Filters × pixels: A is the weights, B the run's pixels (packed each run, or in each call).
  "1×1, 13 filters": { x: [1, 32, 10, 10], w: [13, 32, 1, 1], gather: "in place" },
  // One channel does not factor.
  "2×2 over one channel": {
    x: [1, 1, 12, 12],
    w: [3, 1, 2, 2],
    gather: "table",
    dequantize: true,
    oneThread: true,
  },
  // 1029² rows of 4 past the table's 16 MB.
  "2×2 over one channel of 1030²": { x: [1, 1, 1030, 1030], w: [2, 1, 2, 2], gather: "index map" },
};

/** ConvInteger of u8 x (zero point 3) by i8 w, its sums as they are or times 0.5 in f32. */
function convInteger({ x, w, attrs = {}, dequantize }: Case) {
  const b = new GraphBuilder();
  const weights = Int8Array.from(uniform(w.reduce((p, d) => p * d), 41, -128, 128), Math.floor);
  const sums = b.op("ConvInteger", [
    b.input("x", x, "u8"),
    b.constant(weights, w, "i8"),
    b.constant(new Uint8Array([3]), [], "u8"),
  ], { ...attrs, a_zero: 1 });
  const half = b.constant(new Float32Array([0.5]), [], "f32");
  const y = dequantize ? b.op("Mul", [b.op("Cast", [sums], { to: "f32" }), half]) : sums;
  return b.output("y", y).build();
}

/** How the integer product `kernel` reads A (see {@linkcode Case.gather}). */
function gatherOf(kernel: KernelIR): Case["gather"] {
  if (!packsA(kernel)) return "in place";
  if (indirectionFill(kernel) === undefined) return "index map";
  return tableTaps(kernel) ? "taps" : "table";
}

/**
 * The ways integer products pack their values: i16 pairs (`i32x4.dot_i16x8_s`), or bytes on
 * relaxed SIMD's byte dot product, forced on (the activations' bytes stay below 128, where every
 * engine's byte dot is exact).
 */
const WAYS = [{ name: "i16 pairs", byteDot: false, lanes: 2 }, {
  name: "bytes",
  byteDot: true,
  lanes: 4,
}] as const;

for (const way of WAYS) {
  Deno.test(`integer convolutions run the integer tiles (${way.name}) over gathered patches, exact with one thread or two`, async () => {
    const one = new WasmBackend({ threads: 1, warmUpMs: 0, byteDot: way.byteDot });
    const two = new WasmBackend({ threads: 2, warmUpMs: 0, byteDot: way.byteDot });
    const dir = await Deno.makeTempDir();
    try {
      const took: boolean[] = [];
      for (const [name, c] of Object.entries(CASES)) {
        took.push(await assertTiled(`${name}, ${way.name}`, c, { one, two, dir, way }));
      }
      // A worker late now and then on a loaded machine leaves a case's pieces to the caller.
      assert.ok(took.some(Boolean), "the worker took pieces of some product");
    } finally {
      one.dispose();
      two.dispose();
      await removeDir(dir);
    }
  });
}

/**
 * Case `c` on `one` thread against the reference: one integer product, its plan, exact; on two
 * alike. Whether the worker took pieces of it.
 */
async function assertTiled(
  name: string,
  c: Case,
  { one, two, dir, way }: {
    one: WasmBackend;
    two: WasmBackend;
    dir: string;
    way: typeof WAYS[number];
  },
): Promise<boolean> {
  const graph = convInteger(c);
  const size = c.x.reduce((p, d) => p * d);
  const x: HostTensor = {
    data: Uint8Array.from(uniform(size, 42, 0, 128), Math.floor),
    shape: c.x,
    dtype: "u8",
  };
  using reference = await compile(graph, { backend: "reference" });
  const want = numbers((await reference.run({ x })).y.data);
  using single = await compile(graph, { backend: one, cache: false });
  const products = single.plan!.kernels.filter((k) => integerPlan(k, way.byteDot));
  assert.equal(products.length, 1, name);
  const [product] = products;
  assert.equal(integerPlan(product, way.byteDot)?.lanes, way.lanes, name);
  assert.equal(gatherOf(product), c.gather, name);
  if (c.blocks) {
    assert.equal(Math.ceil(rowsOfA(product, c.w[0]) / packBlockRows(product)), c.blocks, name);
  }
  // The tiles' module: it takes B's panels packed (the generic reduction takes none).
  const bytes = await one.codegen!.generate(product) as Uint8Array<ArrayBuffer>;
  assert.ok(packsOf(new WebAssembly.Module(bytes)), name);
  assert.deepEqual(numbers((await single.run({ x })).y.data), want, name);
  return !c.oneThread && await assertThreadsAlike(graph, { x }, two, `${name}, 2 threads`, dir);
}

/**
 * Runs `graph` on `two` threads (the thread verdict seeded in a kernel cache under `dir`) until
 * the worker has taken pieces of it (for up to 3 s), each run's `y` as one thread's; whether it
 * took pieces.
 */
async function assertThreadsAlike(
  graph: Graph,
  feeds: Record<string, HostTensor>,
  two: WasmBackend,
  name: string,
  dir: string,
): Promise<boolean> {
  const want = numbers((await runGraph(graph, feeds, "reference")).y.data);
  const cache = () => new KernelCache({ dir });
  {
    using probe = await compile(graph, { backend: two, cache: cache() });
    await Deno.writeTextFile(`${dir}/${tuningNoteOf(two, probe.plan!.kernels)}`, "threads 2");
  }
  using split = await compile(graph, { backend: two, cache: cache() });
  await split.run(feeds);
  // The worker spawns after the first run's task: runs go on until it has taken pieces.
  await new Promise((r) => setTimeout(r, 300));
  const before = counterValues().kiln_worker_pieces_total;
  const took = () => counterValues().kiln_worker_pieces_total > before;
  const until = performance.now() + 3000;
  for (let i = 0; i < 3 || (performance.now() < until && !took()); i++) {
    assert.deepEqual(numbers((await split.run(feeds)).y.data), want, name);
  }
  return took();
}

Deno.test("a 7×7 stem of 3 channels runs the byte tiles, a channel of zero weights added", async () => {
  const one = new WasmBackend({ threads: 1, warmUpMs: 0, byteDot: true });
  const two = new WasmBackend({ threads: 2, warmUpMs: 0, byteDot: true });
  const dir = await Deno.makeTempDir();
  try {
    const stem: Case = {
      x: [1, 3, 40, 40],
      w: [16, 3, 7, 7],
      attrs: { strides: [2, 2], pads: [3, 3, 3, 3] },
      // The zero channel does not factor into taps: the whole table (400 rows of 196).
      gather: "table",
      dequantize: true,
      oneThread: true,
    };
    await assertTiled("7×7 stem, bytes", stem, { one, two, dir, way: WAYS[1] });
  } finally {
    one.dispose();
    two.dispose();
    await removeDir(dir);
  }
});

Deno.test("an integer convolution of odd patches or of groups decomposes into exact float slices", async () => {
  const wasm = new WasmBackend({ threads: 1, warmUpMs: 0 });
  try {
    const cases: [string, Case, Record<string, number | number[]>][] = [
      ["7×7 stem over 3 channels", { x: [1, 3, 20, 20], w: [8, 3, 7, 7], gather: "taps" }, {
        strides: [2, 2],
        pads: [3, 3, 3, 3],
      }],
      ["two groups", { x: [1, 8, 6, 6], w: [6, 4, 3, 3], gather: "taps" }, { group: 2 }],
    ];
    for (const [name, c, attrs] of cases) {
      const graph = convInteger({ ...c, attrs });
      const x: HostTensor = {
        data: Uint8Array.from(uniform(c.x.reduce((p, d) => p * d), 43, 0, 256), Math.floor),
        shape: c.x,
        dtype: "u8",
      };
      using reference = await compile(graph, { backend: "reference" });
      using exe = await compile(graph, { backend: wasm, cache: false });
      assert.ok(!exe.plan!.kernels.some((k) => integerPlan(k)), name);
      const got = numbers((await exe.run({ x })).y.data);
      assert.deepEqual(got, numbers((await reference.run({ x })).y.data), name);
    }
  } finally {
    wasm.dispose();
  }
});

Deno.test("byte products of matmuls: u8 rows in place, i8 ones moved to unsigned, a panel split", async () => {
  // [rows, K, N]: tiles of 6 rows and fewer, a last panel of 5 columns; 8 rows split B's panels.
  const shapes = [[2 * 23, 64, 45], [8, 128, 600]];
  const one = new WasmBackend({ threads: 1, warmUpMs: 0, byteDot: true });
  const two = new WasmBackend({ threads: 2, warmUpMs: 0, byteDot: true });
  const dir = await Deno.makeTempDir();
  const took: boolean[] = [];
  try {
    for (const [rows, k, n] of shapes) {
      for (const dtype of ["u8", "i8"] as const) {
        const b = new GraphBuilder();
        const weights = Int8Array.from(uniform(k * n, 51, -128, 128), Math.floor);
        const zero = dtype === "u8" ? new Uint8Array([9]) : new Int8Array([-9]);
        const y = b.op("MatMulInteger", [
          b.input("x", [rows, k], dtype),
          b.constant(weights, [k, n], "i8"),
          b.constant(zero, [], dtype),
        ], { a_zero: 1 });
        const graph = b.output("y", y).build();
        // Unsigned bytes below 128: u8 in [0, 128), i8 in [−128, 0).
        const lo = dtype === "u8" ? 0 : -128, values = uniform(rows * k, 52, lo, lo + 128);
        const data = dtype === "u8"
          ? Uint8Array.from(values, Math.floor)
          : Int8Array.from(values, Math.floor);
        const x: HostTensor = { data, shape: [rows, k], dtype };
        const name = `${rows} × ${k} × ${n}, ${dtype}`;
        using reference = await compile(graph, { backend: "reference" });
        const want = numbers((await reference.run({ x })).y.data);
        using single = await compile(graph, { backend: one, cache: false });
        assert.ok(single.plan!.kernels.some((k) => integerPlan(k, true)?.lanes === 4), name);
        assert.deepEqual(numbers((await single.run({ x })).y.data), want, name);
        took.push(await assertThreadsAlike(graph, { x }, two, `${name}, 2 threads`, dir));
      }
    }
    assert.ok(took.some(Boolean), "the worker took pieces of some product");
  } finally {
    one.dispose();
    two.dispose();
    await removeDir(dir);
  }
});

/**
 * Removes the kernel cache's folder `dir`: a program's thread verdict is stored as its runs go on,
 * and may land as the folder is removed (once "Directory not empty"), so a second try follows.
 */
async function removeDir(dir: string): Promise<void> {
  for (let tries = 0;; tries++) {
    try {
      return await Deno.remove(dir, { recursive: true });
    } catch (e) {
      if (tries >= 4) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

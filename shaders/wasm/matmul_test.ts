import assert from "node:assert/strict";
import { compile } from "../../mod.ts";
import { counterValues } from "../../jit/runtime/counters.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { GraphBuilder, type Sym } from "../../jit/frontend/graph_builder.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { KernelCache, tuningNoteOf } from "../../jit/runtime/kernel_cache.ts";
import { uniform } from "../../jit/support/random.ts";
import { assertClose, f32, numbers } from "../../jit/testing/testing.ts";
import { HOST_FUNCTIONS, WasmBackend } from "../../backends/wasm/wasm_backend.ts";
import { batchesOfB, panelSplit, prepackBytes, scratchBytes } from "./matmul_plan.ts";

Deno.test("a transformer's few hundred rows split B's panels where A is read in place, rows where it is packed", () => {
  const kernelOf = (build: (b: GraphBuilder) => Sym) => {
    const b = new GraphBuilder();
    b.output("y", build(b));
    return fuse(b.build()).kernels.find((k) => k.pattern === "matmul" || k.space.length > 3)!;
  };
  const linear = (rows: number) =>
    kernelOf((b) => b.op("MatMul", [b.input("x", [rows, 768]), b.input("w", [768, 3072])]));
  assert.equal(panelSplit(linear(128)), 384, "BERT's 128 tokens: 384 panels");
  assert.equal(panelSplit(linear(197)), 384, "ViT's 197 tokens");
  assert.equal(panelSplit(linear(512)), 0, "512 rows split by rows");
  const conv = kernelOf((b) =>
    b.op("Conv", [b.input("x", [1, 64, 14, 14]), b.input("w", [256, 64, 3, 3])], {
      pads: [1, 1, 1, 1],
    })
  );
  assert.equal(panelSplit(conv), 0, "196 pixels of packed patches split by rows");
  const pointwise = kernelOf((b) =>
    b.op("Conv", [b.input("x", [1, 1024, 14, 14]), b.input("w", [256, 1024, 1, 1])])
  );
  assert.equal(panelSplit(pointwise), 0, "a 1×1 conv's 196 pixels: 25 panels, too few to share");
});

Deno.test("a panel-split matmul's call computes panels [start, end) of every row and nothing else", async () => {
  const [m, k, n] = [5, 300, 83];
  const x = uniform(m * k, 1), w = uniform(k * n, 2);
  const b = new GraphBuilder();
  b.output("y", b.op("MatMul", [b.input("x", [m, k]), b.param("w", [k, n], "f32", w)]));
  const [kernel] = fuse(b.build()).kernels;
  assert.equal(panelSplit(kernel), 11, "83 columns: 10 panels of 8, one of 3");
  const backend = new WasmBackend({ threads: 1, warmUpMs: 0 });
  const bytes = await backend.codegen!.generate(kernel) as Uint8Array<ArrayBuffer>;
  const memory = new WebAssembly.Memory({ initial: 16, maximum: 65536 });
  const env = { memory, ...HOST_FUNCTIONS };
  const run = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env }).exports.run as (
    ...args: number[]
  ) => void;
  // The arena: x, w, y, the scratch, B's panels.
  const at = { x: 1024, w: 1024 + 4 * m * k, y: 1024 + 4 * (m * k + k * n) };
  const scratch = at.y + 4 * m * n, packed = scratch + scratchBytes(kernel);
  assert.ok(packed + prepackBytes(kernel) < memory.buffer.byteLength);
  new Float32Array(memory.buffer, at.x, m * k).set(x);
  new Float32Array(memory.buffer, at.w, k * n).set(w);
  const buffers = [...kernel.inputs, ...kernel.outputs].map((buf) =>
    buf.shape[0] === m ? (buf.shape[1] === k ? at.x : at.y) : at.w
  );
  const call = (start: number, end: number) => run(...buffers, scratch, start, end, packed);
  call(-1, 0); // packs B
  const y = new Float32Array(memory.buffer, at.y, m * n);
  const want = Array.from({ length: m * n }, (_, i) => {
    let sum = 0;
    for (let j = 0; j < k; j++) sum += x[Math.floor(i / n) * k + j] * w[j * n + (i % n)];
    return sum;
  });
  for (const [start, end] of [[0, 2], [2, 5], [5, 11], [10, 11]]) {
    y.fill(NaN);
    call(start, end);
    const columns = (c: number) => c >= 8 * start && c < Math.min(n, 8 * end);
    for (let i = 0; i < m * n; i++) {
      if (columns(i % n)) assert.ok(Math.abs(y[i] - want[i]) < 1e-4, `[${start}, ${end}) ${i}`);
      else assert.ok(Number.isNaN(y[i]), `[${start}, ${end}) wrote column ${i % n}`);
    }
  }
  backend.dispose();
});

type Case = [name: string, x: HostTensor, build: (b: GraphBuilder, x: Sym) => Sym];

Deno.test("a matmul of few rows splits B's panels among threads: the same bits as one thread", async () => {
  // Each a millisecond or so a run.
  const cases: Case[] = [
    // 42 panels, the last 3 columns wide; a bias and a Relu in the epilogue.
    ["linear layer", f32(uniform(5 * 4096, 1), [5, 4096]), (b, x) => {
      const w = b.param("w", [4096, 331], "f32", uniform(4096 * 331, 2));
      const bias = b.param("bias", [331], "f32", uniform(331, 3));
      return b.op("Relu", [b.op("Add", [b.op("MatMul", [x, w]), bias])]);
    }],
    // B changes with the batch (attention's heads): each call covers every head's rows.
    ["batched B", f32(uniform(4 * 16 * 1024, 4), [2, 2, 16, 1024]), (b, x) => {
      const w = b.param("w", [2, 2, 1024, 52], "f32", uniform(4 * 1024 * 52, 5));
      return b.op("MatMul", [x, w]);
    }],
    // B is the run's pixels (a 1×1 convolution as filters × pixels): each call packs its panels.
    ["pixels", f32(uniform(256 * 900, 8), [1, 256, 30, 30]), (b, x) => {
      const w = b.param("w", [48, 256, 1, 1], "f32", uniform(48 * 256, 9));
      return b.op("Relu", [b.op("Conv", [x, w])]);
    }],
    // A packed from a convolution's patches: every call packs all 16 rows.
    ["convolution", f32(uniform(64 * 16, 6), [1, 64, 4, 4]), (b, x) => {
      const w = b.param("w", [300, 64, 3, 3], "f32", uniform(300 * 576, 7));
      return b.op("Conv", [x, w], { pads: [1, 1, 1, 1] });
    }],
  ];
  const one = new WasmBackend({ threads: 1, warmUpMs: 0 });
  const two = new WasmBackend({ threads: 2, warmUpMs: 0 });
  const dir = await Deno.makeTempDir();
  try {
    for (const [name, x, build] of cases) {
      const b = new GraphBuilder();
      b.output("y", build(b, b.input("x", x.shape)));
      const graph = b.build();
      const product = fuse(graph).kernels.find((k) => panelSplit(k) > 0);
      assert.ok(product, name);
      const exports = WebAssembly.Module.exports(
        new WebAssembly.Module(await one.codegen!.generate(product) as Uint8Array<ArrayBuffer>),
      ).map((e) => e.name);
      assert.equal(
        exports.includes("packsInCalls"),
        ["linear layer", "pixels"].includes(name),
        name,
      );
      using reference = await compile(graph, { backend: "reference" });
      using single = await compile(graph, { backend: one, cache: false });
      const want = numbers((await single.run({ x })).y.data);
      const expected = numbers((await reference.run({ x })).y.data);
      assertClose(want, expected, { atol: 1e-3, message: name });
      // Seed the thread verdict, so that every run below takes the threads.
      const cache = () => new KernelCache({ dir });
      {
        using probe = await compile(graph, { backend: two, cache: cache() });
        await Deno.writeTextFile(`${dir}/${tuningNoteOf(two, probe.plan!.kernels)}`, "threads 2");
      }
      using split = await compile(graph, { backend: two, cache: cache() });
      await split.run({ x });
      // The worker spawns after that run's task and is up within a few tens of milliseconds.
      await new Promise((r) => setTimeout(r, 300));
      // Pieces go to whichever thread claims them first: a worker waking late leaves them all to
      // the caller now and then, so the runs go on until the worker has taken some (for up to
      // 3 s: on a loaded 2-core machine 100 runs once went by without the worker scheduled).
      const before = counterValues().kiln_worker_pieces_total;
      const took = () => counterValues().kiln_worker_pieces_total > before;
      const until = performance.now() + 3000;
      for (let i = 0; i < 4 || (performance.now() < until && !took()); i++) {
        assert.deepEqual(numbers((await split.run({ x })).y.data), want, name);
      }
      assert.ok(took(), `${name}: the worker took pieces`);
    }
  } finally {
    one.dispose();
    two.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("1×1 convs run as filters × pixels: groups, images, a bias, a residual, 8 pixels or 7", async () => {
  const wasm = new WasmBackend({ threads: 2, warmUpMs: 0 });
  // [x, w, group]: 13 filters (tiles of 6 with a remainder), 2 groups, one image or two; 8 pixels
  // (one panel) take the filters × pixels layout, 7 do not.
  const cases: [number[], number[], number][] = [
    [[2, 6, 5, 8], [13, 6, 1, 1], 1],
    [[1, 8, 4, 2], [10, 4, 1, 1], 2],
    [[2, 6, 1, 7], [13, 6, 1, 1], 1],
  ];
  for (const [xs, ws, group] of cases) {
    const b = new GraphBuilder();
    const size = (s: number[]) => s.reduce((p, d) => p * d);
    const w = b.param("w", ws, "f32", uniform(size(ws), 3));
    const bias = b.param("bias", [ws[0]], "f32", uniform(ws[0], 4));
    const conv = b.op("Conv", [b.input("x", xs), w, bias], { group });
    const ys = [xs[0], ws[0], xs[2], xs[3]];
    b.output("y", b.op("Relu", [b.op("Add", [conv, b.input("r", ys)])]));
    const graph = b.build();
    assert.equal(fuse(graph).kernels.length, 1);
    const feeds = {
      x: f32(uniform(size(xs), 5), xs),
      r: f32(uniform(size(ys), 6), ys),
    };
    const [want, got] = await Promise.all(["reference", wasm].map(async (backend) => {
      using exe = await compile(graph, { backend, cache: false });
      return (await exe.run(feeds)).y;
    }));
    assertClose(numbers(got.data), numbers(want.data), { atol: 1e-5, rtol: 1e-5 });
  }
  wasm.dispose();
});

/** 2 key or value heads ([1, 2, 1, tokens, width]) each shared by 7 query heads, as 14. */
function sharedHeads(b: GraphBuilder, x: Sym, tokens: number, width: number): Sym {
  const wide = b.op("Expand", [x], { shape: [1, 2, 7, tokens, width] });
  return b.op("Reshape", [wide], { shape: [1, 14, tokens, width] });
}

Deno.test("keys shared by heads (grouped-query attention) run the tiled product, a panel set a head", async () => {
  // Scores of 14 query heads against 2 key heads, each shared by 7, with a scale and a mask.
  const tokens = 40, b = new GraphBuilder();
  const q = b.input("q", [1, 14, tokens, 64]);
  const k = b.input("k", [1, 2, 1, tokens, 64]);
  const heads = sharedHeads(b, k, tokens, 64);
  const scores = b.op("MatMul", [q, b.op("Transpose", [heads], { perm: [0, 1, 3, 2] })]);
  b.output(
    "s",
    b.op("Add", [b.op("Mul", [scores, b.constant(0.125)]), b.input("mask", [tokens, tokens])]),
  );
  const graph = b.build();
  const kernel = fuse(graph).kernels.find((x) => x.pattern === "matmul")!;
  assert.equal(batchesOfB(kernel), 14, "B's panels are packed per head, from each head's base");
  const feeds = {
    q: f32(uniform(14 * tokens * 64, 70, -1, 1), [1, 14, tokens, 64]),
    k: f32(uniform(2 * tokens * 64, 71, -1, 1), [1, 2, 1, tokens, 64]),
    mask: f32(uniform(tokens * tokens, 72, -1, 0), [tokens, tokens]),
  };
  const want = await (await compile(graph, { backend: "reference" })).run(feeds);
  for (const threads of [1, 2]) {
    const wasm = new WasmBackend({ threads });
    const got = await (await compile(graph, { backend: wasm, cache: false })).run(feeds);
    assertClose(numbers(got.s.data), numbers(want.s.data), { rtol: 1e-5, atol: 1e-5 });
    wasm.dispose();
  }
});

Deno.test("a decode step's scores (few query rows, keys along the head's width) run as dot products", async () => {
  // One or three query rows a head of 14 against 2 key heads, each shared by 7, with a scale and
  // a mask; widths of 64 and of 67 (three products past the last four).
  for (const [rows, tokens, width] of [[1, 257, 64], [3, 37, 67], [5, 9, 12]]) {
    const b = new GraphBuilder();
    const q = b.input("q", [1, 14, rows, width]);
    const k = b.input("k", [1, 2, 1, tokens, width]);
    const heads = sharedHeads(b, k, tokens, width);
    const scores = b.op("MatMul", [q, b.op("Transpose", [heads], { perm: [0, 1, 3, 2] })]);
    const mask = b.input("mask", [rows, tokens]);
    b.output("s", b.op("Add", [b.op("Mul", [scores, b.constant(0.125)]), mask]));
    const graph = b.build();
    const feeds = {
      q: f32(uniform(14 * rows * width, 80, -1, 1), [1, 14, rows, width]),
      k: f32(uniform(2 * tokens * width, 81, -1, 1), [1, 2, 1, tokens, width]),
      mask: f32(uniform(rows * tokens, 82, -1, 0), [rows, tokens]),
    };
    const want = await (await compile(graph, { backend: "reference" })).run(feeds);
    for (const threads of [1, 2]) {
      const wasm = new WasmBackend({ threads });
      const got = await (await compile(graph, { backend: wasm, cache: false })).run(feeds);
      const message = `${rows} rows × ${tokens} keys × ${width}, ${threads} thread(s)`;
      assertClose(numbers(got.s.data), numbers(want.s.data), { rtol: 1e-5, atol: 1e-5, message });
      wasm.dispose();
    }
  }
});

Deno.test("a decode step's weighted values (few query rows, values along the head's width) sum panels in registers", async () => {
  // One or three query rows a head of 14 against 2 value heads, each shared by 7, plus a
  // residual; widths of 64 (two panels of 32), 40 (32 and 8) and 6 (not quads: the k-outer loop).
  for (const [rows, tokens, width] of [[1, 257, 64], [3, 37, 40], [2, 9, 6]]) {
    const b = new GraphBuilder();
    const p = b.input("p", [1, 14, rows, tokens]);
    const v = b.input("v", [1, 2, 1, tokens, width]);
    const heads = sharedHeads(b, v, tokens, width);
    const residual = b.input("r", [1, 14, rows, width]);
    b.output("y", b.op("Add", [b.op("MatMul", [p, heads]), residual]));
    const graph = b.build();
    const feeds = {
      p: f32(uniform(14 * rows * tokens, 83, 0, 1), [1, 14, rows, tokens]),
      v: f32(uniform(2 * tokens * width, 84, -1, 1), [1, 2, 1, tokens, width]),
      r: f32(uniform(14 * rows * width, 85, -1, 1), [1, 14, rows, width]),
    };
    const want = await (await compile(graph, { backend: "reference" })).run(feeds);
    const exactly = { cache: false, precision: "exact" } as const;
    const bits = await (await compile(graph, { backend: "reference", ...exactly })).run(feeds);
    for (const threads of [1, 2]) {
      const wasm = new WasmBackend({ threads });
      const message = `${rows} rows × ${tokens} values × ${width}, ${threads} thread(s)`;
      const got = await (await compile(graph, { backend: wasm, cache: false })).run(feeds);
      assertClose(numbers(got.y.data), numbers(want.y.data), { rtol: 1e-5, atol: 1e-5, message });
      // The exact precision multiplies and adds apart, in K's order: the reference's bits.
      const exact = await compile(graph, { backend: wasm, ...exactly });
      assert.deepEqual(numbers((await exact.run(feeds)).y.data), numbers(bits.y.data), message);
      wasm.dispose();
    }
  }
});

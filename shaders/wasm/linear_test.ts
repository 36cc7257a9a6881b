import assert from "node:assert/strict";
import { GraphBuilder, type Sym } from "../../jit/frontend/graph_builder.ts";
import { assertClose, f32, numbers, runGraph } from "../../jit/testing/testing.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import type { Graph } from "../../jit/ir/graph.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { WasmBackend } from "../../backends/wasm/wasm_backend.ts";

const wasm = new WasmBackend({ threads: 1 });
await wasm.prepare();

/** `n` values in [-1, 1) from `seed`, repeatable. */
function values(n: number, seed: number): number[] {
  let s = seed;
  return Array.from(
    { length: n },
    () => ((s = (s * 1103515245 + 12345) % 2147483648) / 2 ** 30) - 1,
  );
}

/** Fuses `graph` into one kernel and checks its wasm output `y` against the reference's. */
async function oneKernelLikeReference(
  graph: Graph,
  feeds: Record<string, HostTensor>,
  tolerance: number,
  name = "",
): Promise<void> {
  assert.equal(fuse(graph).kernels.length, 1, `${name}: one kernel`);
  const [want, got] = await Promise.all(
    ["reference", wasm].map((backend) => runGraph(graph, feeds, backend)),
  );
  assertClose(numbers(got.y.data), numbers(want.y.data), { atol: tolerance, rtol: tolerance });
}

Deno.test("row kernels walk loads whose bounds hold or fail by row: Concat's parts, a Pad of rows", async () => {
  type Build = (b: GraphBuilder, x: Sym, c: number) => Sym;
  // ViT's tokens: a class token before the patches, position embeddings, LayerNorm over the
  // channels; the patches transposed from a channel-major layout, or not.
  const vit = (transposed: boolean): Build => (b, x, c) => {
    const cls = b.param("cls", [2, 1, c], "f32", Float32Array.from(values(2 * c, 3)));
    const patches = transposed ? b.op("Transpose", [x], { perm: [0, 2, 1] }) : x;
    const tokens = b.op("Concat", [cls, patches], { axis: 1 });
    const pos = b.param("pos", [1, 6, c], "f32", Float32Array.from(values(6 * c, 4)));
    const g = b.param("g", [c], "f32", Float32Array.from(values(c, 5)));
    const beta = b.param("beta", [c], "f32", Float32Array.from(values(c, 6)));
    return b.op("LayerNormalization", [b.op("Add", [tokens, pos]), g, beta], { axis: -1 });
  };
  const cases: [string, (c: number) => number[], Build][] = [
    ["class token, patches", (c) => [2, 5, c], vit(false)],
    ["class token, transposed patches", (c) => [2, c, 5], vit(true)],
    // Three parts, the middle one row of its own; softmax over each row.
    ["three parts, softmax", (c) => [2, 3, c], (b, x, c) => {
      const mid = b.param("mid", [2, 1, c], "f32", Float32Array.from(values(2 * c, 7)));
      return b.op("Softmax", [b.op("Concat", [x, mid, x], { axis: 1 })], { axis: -1 });
    }],
    // Rows of padding read the fill (0.5) in every lane, scaled before a softmax (which a
    // fill of 0 would make uniform).
    ["a Pad of rows", (c) => [2, 3, c], (b, x, c) => {
      const padded = b.op("Pad", [x], { pads: [0, 2, 0, 0, 1, 0], value: 0.5 });
      const scale = b.param("scale", [1, 6, c], "f32", Float32Array.from(values(6 * c, 9)));
      return b.op("Softmax", [b.op("Mul", [padded, scale])], { axis: -1 });
    }],
  ];
  // Rows shorter than a vector, a vector and a tail, and ViT-tiny's 96 channels.
  for (const c of [3, 13, 96]) {
    for (const [name, shape, build] of cases) {
      const b = new GraphBuilder();
      const x = b.input("x", shape(c));
      b.output("y", build(b, x, c));
      const graph = b.build();
      const n = shape(c).reduce((p, d) => p * d);
      await oneKernelLikeReference(graph, { x: f32(values(n, 8 + c), shape(c)) }, 1e-5, name);
    }
  }
});

Deno.test("a softmax whose output is used, not stored as is, reads back its terms once stored", async () => {
  // The dynamo exporter's Where(IsNaN(y), 0, y) around y = Softmax(x): the sum's loop stores
  // each exp, and the output loop reads it back in both places y is used. A row of NaN takes
  // the Where's other branch; 3 and 13 columns are a tail alone and vectors with a tail.
  for (const c of [3, 13]) {
    const b = new GraphBuilder();
    const y = b.op("Softmax", [b.input("x", [4, c])], { axis: -1 });
    b.output("y", b.op("Where", [b.op("IsNaN", [y]), b.constant(0), b.op("Mul", [y, y])]));
    const graph = b.build();
    const x = values(4 * c, 10).map((v, i) => (i < c ? NaN : 4 * v));
    await oneKernelLikeReference(graph, { x: f32(x, [4, c]) }, 1e-6);
  }
});

Deno.test("a tiled matmul's epilogue walks loads whose bounds hold or fail by row", async () => {
  // A residual of fewer rows, padded with 0.5 (ViT's projection adds class token + patches);
  // 12 and 21 columns: a panel and a narrower one, vectors with a tail.
  for (const n of [12, 21]) {
    const b = new GraphBuilder();
    const w = b.param("w", [16, n], "f32", Float32Array.from(values(16 * n, 11)));
    const product = b.op("MatMul", [b.input("x", [2, 9, 16]), w]);
    const residual = b.op("Pad", [b.input("r", [2, 6, n])], {
      pads: [0, 2, 0, 0, 1, 0],
      value: 0.5,
    });
    b.output("y", b.op("Add", [product, residual]));
    const graph = b.build();
    const feeds = { x: f32(values(288, 12), [2, 9, 16]), r: f32(values(12 * n, 13), [2, 6, n]) };
    await oneKernelLikeReference(graph, feeds, 1e-5);
  }
});

Deno.test("elementwise segments walk rows gathered by an index of a fixed position; bad indices fault", async () => {
  // A bilinear Resize along the height: rows gathered by two indices of the output row,
  // weighted; 3 and 13 columns (a tail alone, vectors and a tail). An index past the rows
  // fails the run with the gather's error, as it does on the reference backend.
  for (const w of [3, 13]) {
    const b = new GraphBuilder();
    const x = b.input("x", [2, 3, 5, w]);
    const i0 = b.input("i0", [8], "i32"), i1 = b.input("i1", [8], "i32");
    const weight = b.param("wt", [1, 1, 8, 1], "f32", Float32Array.from(values(8, 14)));
    const g0 = b.op("Mul", [b.op("Gather", [x, i0], { axis: 2 }), weight]);
    b.output("y", b.op("Add", [g0, b.op("Gather", [x, i1], { axis: 2 })]));
    const graph = b.build();
    const rows = (a: number[]) => ({ data: Int32Array.from(a), shape: [8], dtype: "i32" as const });
    const feeds = {
      x: f32(values(30 * w, 15), [2, 3, 5, w]),
      i0: rows([0, 0, 1, 1, 2, -2, 3, 4]),
      i1: rows([1, 1, 2, 2, 3, 3, 4, 4]),
    };
    await oneKernelLikeReference(graph, feeds, 1e-6);
    const bad = { ...feeds, i1: rows([1, 1, 2, 9, 3, 3, 4, 4]) };
    for (const backend of ["reference", wasm]) {
      await assert.rejects(runGraph(graph, bad, backend), /index 9/);
    }
  }
});

Deno.test("loads two or three elements apart take two vectors and a shuffle: pools, strided slices, masks", async () => {
  for (const stride of [2, 3]) {
    // Pools of strided windows, padded (their rows' ends read the fill lane by lane).
    for (const [op, kernel] of [["MaxPool", 3], ["AveragePool", 4]] as const) {
      const b = new GraphBuilder();
      b.output(
        "y",
        b.op(op, [b.input("x", [2, 3, 17, 23])], {
          kernel_shape: [kernel, kernel],
          strides: [stride, stride],
          pads: [1, 1, 1, 1],
        }),
      );
      await oneKernelLikeReference(
        b.build(),
        { x: f32(values(2346, 16), [2, 3, 17, 23]) },
        1e-6,
        op,
      );
    }
    // Every stride-th column of x, and of a bool mask choosing between x and y.
    const b = new GraphBuilder();
    const x = b.input("x", [5, 40]), y = b.input("y", [5, 40 / 2]);
    const slice = (v: Sym, end: number, step: number) =>
      b.op("Slice", [v], { starts: [0], ends: [end], axes: [1], steps: [step] });
    const picked = slice(x, 40, stride);
    const mask = slice(b.op("Greater", [x, b.constant(0)]), 40, stride);
    const other = slice(y, Math.ceil(40 / stride), 1);
    b.output("y", b.op("Where", [mask, b.op("Mul", [picked, picked]), other]));
    await oneKernelLikeReference(
      b.build(),
      { x: f32(values(200, 17), [5, 40]), y: f32(values(100, 18), [5, 20]) },
      1e-6,
      `stride ${stride}`,
    );
  }
});

Deno.test("many outputs of their own streams loop apart; outputs sharing an activation loop together", async () => {
  // A generation's cache updates: each of 12 outputs keeps its past where the slot is valid and
  // takes its new entry elsewhere (a shared test, cheap to compute again in each loop), one
  // kernel; then the same outputs scaled by one shared sigmoid (work they share).
  for (const shared of [false, true]) {
    const b = new GraphBuilder();
    const keep = b.input("keep", [1, 40, 1], "bool");
    const act = b.op("Sigmoid", [b.input("s", [1, 40, 7])]);
    const feeds: Record<string, HostTensor> = {
      keep: {
        data: Uint8Array.from({ length: 40 }, (_, i) => +(i % 3 !== 0)),
        shape: [1, 40, 1],
        dtype: "bool",
      },
      s: f32(values(280, 99), [1, 40, 7]),
    };
    for (let i = 0; i < 12; i++) {
      const past = b.input(`p${i}`, [2, 40, 7]), next = b.input(`n${i}`, [2, 1, 7]);
      const y = b.op("Where", [keep, past, next]);
      b.output(`y${i}`, shared ? b.op("Mul", [y, act]) : y);
      feeds[`p${i}`] = f32(values(560, 2 * i), [2, 40, 7]);
      feeds[`n${i}`] = f32(values(14, 2 * i + 1), [2, 1, 7]);
    }
    const graph = b.build();
    if (!shared) assert.equal(fuse(graph).kernels.length, 1);
    const [want, got] = await Promise.all(
      ["reference", wasm].map((backend) => runGraph(graph, feeds, backend)),
    );
    for (let i = 0; i < 12; i++) {
      assertClose(numbers(got[`y${i}`].data), numbers(want[`y${i}`].data), {
        atol: 1e-6,
        rtol: 1e-6,
      });
    }
  }
});

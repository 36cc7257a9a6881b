/**
 * The benchmark workloads (W1–W6 of the WASM issue, plus large matmuls for GPUs): each is a kiln
 * graph with seeded inputs (uniform in [-1, 1), identical for every library), the same
 * computation written for each peer, and a float64 check of any library's result.
 *
 * @module
 */
import type { Graph } from "../jit/ir/graph.ts";
import { GraphBuilder, type Sym } from "../jit/frontend/graph_builder.ts";
import { uniform } from "../jit/support/random.ts";
import { importOnnx } from "../onnx/import/import.ts";
import { MODEL_NAMES, referenceModel } from "../onnx/testdata.ts";

/** One benchmark workload. */
export interface Workload {
  /** Id, e.g. `W2-512`, used as the bench group. */
  readonly id: string;
  /** The kiln graph. */
  readonly graph: Graph;
  /** Inputs by name. */
  readonly inputs: Readonly<Record<string, { data: Float32Array; shape: number[] }>>;
  /** Max abs difference of `out` from a float64 computation (sampled for large outputs). */
  check(out: Float32Array): number;
  /** The ONNX model it came from: ONNX Runtime runs that as is, libraries without ONNX skip it. */
  readonly onnx?: Uint8Array;
  /** Timed iterations, for workloads too slow for `deno bench`'s default (large matmuls). */
  readonly n?: number;
}

/** A library's runner for one workload: resolves when the result is a host Float32Array. */
export type PeerRun = () => Promise<Float32Array>;

/** Float64 references of the workloads' elementwise functions. */
export const f64 = {
  /** W1 at one point. */
  w1: (v: number): number => Math.max(v * 1.5 + 0.5, 0) * (1 / (1 + Math.exp(-v))) - (v * v) / 8,
};

function input(shape: number[], seed: number) {
  return { data: uniform(shape.reduce((a, b) => a * b, 1), seed), shape };
}

function sampled(n: number, count: number): number[] {
  if (n <= count) return [...Array(n).keys()];
  return [...Array(count).keys()].map((i) => Math.floor((i * 2654435761) % n));
}

/** W1 over `n` elements: `relu(x·1.5 + 0.5)·sigmoid(x) − x²/8`. */
export function w1(n: number): Workload {
  const b = new GraphBuilder();
  const x = b.input("x", [n]);
  const c = (v: number) => b.constant(v);
  const left = b.op("Mul", [
    b.op("Relu", [b.op("Add", [b.op("Mul", [x, c(1.5)]), c(0.5)])]),
    b.op("Sigmoid", [x]),
  ]);
  b.output("y", b.op("Sub", [left, b.op("Div", [b.op("Mul", [x, x]), c(8)])]));
  const inputs = { x: input([n], 1) };
  return {
    id: `W1-${n >= 1 << 20 ? `${n >> 20}M` : n}`,
    graph: b.build(),
    inputs,
    check: (out) =>
      Math.max(...sampled(n, 4096).map((i) => Math.abs(out[i] - f64.w1(inputs.x.data[i])))),
  };
}

function w2(n: number): Workload {
  const b = new GraphBuilder();
  b.output("y", b.op("MatMul", [b.input("a", [n, n]), b.input("b", [n, n])]));
  const inputs = { a: input([n, n], 2), b: input([n, n], 3) };
  return {
    id: `W2-${n}`,
    graph: b.build(),
    inputs,
    check: (out) =>
      Math.max(
        ...sampled(n * n, 256).map((idx) => {
          const i = Math.floor(idx / n), j = idx % n;
          let s = 0;
          for (let k = 0; k < n; k++) s += inputs.a.data[i * n + k] * inputs.b.data[k * n + j];
          return Math.abs(out[idx] - s);
        }),
      ),
  };
}

function rows(
  shape: [number, number],
  seed: number,
  build: (b: GraphBuilder, x: Sym) => Sym,
  row: (r: Float32Array) => number[],
  id: string,
): Workload {
  const b = new GraphBuilder();
  b.output("y", build(b, b.input("x", shape)));
  const inputs = { x: input(shape, seed) };
  const [m, n] = shape;
  return {
    id,
    graph: b.build(),
    inputs,
    check: (out) =>
      Math.max(
        ...sampled(m, 64).map((r) => {
          const want = row(inputs.x.data.subarray(r * n, (r + 1) * n));
          return Math.max(...want.map((w, j) => Math.abs(out[r * n + j] - w)));
        }),
      ),
  };
}

function softmaxRow(r: Float32Array): number[] {
  const m = Math.max(...r);
  const e = Array.from(r, (v) => Math.exp(v - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / s);
}

function layerNormRow(r: Float32Array): number[] {
  const mean = r.reduce((a, b) => a + b, 0) / r.length;
  const variance = r.reduce((a, b) => a + (b - mean) ** 2, 0) / r.length;
  return Array.from(r, (v) => (v - mean) / Math.sqrt(variance + 1e-5));
}

function w5(): Workload {
  const b = new GraphBuilder();
  const x = b.input("x", [64, 784]);
  const h = b.op("Relu", [
    b.op("Add", [b.op("MatMul", [x, b.input("w1", [784, 512])]), b.input("b1", [512])]),
  ]);
  b.output(
    "y",
    b.op("Softmax", [
      b.op("Add", [b.op("MatMul", [h, b.input("w2", [512, 10])]), b.input("b2", [10])]),
    ]),
  );
  const inputs = {
    x: input([64, 784], 4),
    w1: input([784, 512], 5),
    b1: input([512], 6),
    w2: input([512, 10], 7),
    b2: input([10], 8),
  };
  const { x: X, w1: W1, b1: B1, w2: W2, b2: B2 } = Object.fromEntries(
    Object.entries(inputs).map(([k, v]) => [k, v.data]),
  );
  return {
    id: "W5-mlp",
    graph: b.build(),
    inputs,
    check: (out) => {
      let worst = 0;
      for (const r of [0, 17, 63]) {
        const hid = [...Array(512).keys()].map((j) =>
          Math.max(
            0,
            [...Array(784).keys()].reduce((s, k) => s + X[r * 784 + k] * W1[k * 512 + j], B1[j]),
          )
        );
        const logits = [...Array(10).keys()].map((j) =>
          hid.reduce((s, v, k) => s + v * W2[k * 10 + j], B2[j])
        );
        softmaxRow(Float32Array.from(logits)).forEach((
          v,
          j,
        ) => (worst = Math.max(worst, Math.abs(out[r * 10 + j] - v))));
      }
      return worst;
    },
  };
}

function w6(): Workload {
  const b = new GraphBuilder();
  b.output("y", b.op("Add", [b.input("x", [16]), b.constant(1)]));
  const inputs = { x: input([16], 9) };
  return {
    id: "W6-tiny",
    graph: b.build(),
    inputs,
    check: (out) => Math.max(...Array.from(out, (v, i) => Math.abs(v - (inputs.x.data[i] + 1)))),
  };
}

/**
 * The shared reference models (`../shared/models`: PyTorch exports with ONNX Runtime's outputs),
 * checked against those outputs; none when the folder is missing.
 */
export async function modelWorkloads(): Promise<Workload[]> {
  const out: Workload[] = [];
  for (const name of MODEL_NAMES) {
    const m = await referenceModel(name).catch(() => undefined);
    if (!m) continue;
    out.push({
      id: name,
      graph: importOnnx(m.bytes),
      inputs: { x: { data: m.x.data as Float32Array, shape: [...m.x.shape] } },
      onnx: m.bytes,
      check: (y) => Math.max(...Array.from(m.y, (v, i) => Math.abs(y[i] - v))),
    });
  }
  return out;
}

/** The CPU workloads: W1–W6 and matmuls of 2048 and 4096. */
export function cpuWorkloads(): Workload[] {
  return [
    w1(1 << 20),
    w1(1 << 24),
    w2(256),
    w2(512),
    w2(1024),
    rows([4096, 1024], 10, (b, x) => b.op("Softmax", [x], { axis: -1 }), softmaxRow, "W3-softmax"),
    rows(
      [4096, 1024],
      11,
      (b, x) =>
        b.op("LayerNormalization", [x, b.constant(new Float32Array(1024).fill(1))], {
          epsilon: 1e-5,
        }),
      layerNormRow,
      "W4-layernorm",
    ),
    w5(),
    w6(),
    { ...w2(2048), n: 5 },
    { ...w2(4096), n: 2 },
  ];
}

/**
 * A structure-aware fuzzer for everything a stranger's model reaches: the decoder, the importer,
 * compilation and every backend. Each case is a seeded function of `(seed, id)`:
 *
 * - a **mutant**: a corpus model (a fresh random graph exported to ONNX, or one of the repository's
 *   PyTorch exports) with one to three mutations at the field level (dims, element types,
 *   attributes, node inputs and outputs, op types, node order, initializers, the opset) or at the
 *   byte level (bit flips, truncation, over-long varints and lengths);
 * - a **graph**: a random graph with edge shapes (size-0 and size-1 dimensions) run on inputs full
 *   of special values (NaN, ±Infinity, ±0, values near the f32 limits);
 * - a **generated** model (one case in five, `fuzz_grammar.ts`): nested loops, variadic nodes of
 *   thousands of inputs, int64 near its limits, external data behind links and encodings, each
 *   with its exact answer as the oracle.
 *
 * Whatever imports is compiled and run on each backend asked for, on the same inputs, and compared
 * with the reference. A case ends `ok` (it ran and agreed), `typed` (a `KilnError` refused it) or
 * `bug`: any other exception, results that differ from the reference, or a case slower than its
 * budget (the reference's own runs not counted). `deno task fuzz` runs many cases over worker
 * processes (a hang is caught there).
 *
 * @module
 */
import { compile, type CompileOptions, setMemoryBudget } from "../../mod.ts";
import { allocate, fromBf16Bits, fromF16Bits, type TensorData } from "../../jit/ir/dtype.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { boundaryOf, Graph, nodeSpecOf } from "../../jit/ir/graph.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { randomGraph } from "../../jit/testing/random_graph.ts";
import { rng } from "../../jit/support/random.ts";
import { RANDOM_OPS } from "../../jit/passes/random_inputs.ts";
import { isClose } from "../../jit/testing/testing.ts";
import { CONVERTERS } from "../../onnx/convert/mod.ts";
import { type GrammarCase, grammarCase, WrongAnswer } from "./fuzz_grammar.ts";
import { jittered } from "./jitter.ts";
import { toOnnx } from "../../onnx/export/export.ts";
import { importModel } from "../../onnx/import/import.ts";
import { onnxInputs } from "../../onnx/import/inputs.ts";
import {
  decodeModel,
  encodeModel,
  type ModelProto,
  type NodeProto,
} from "../../onnx/wire/proto.ts";

/** How one case ended. */
export interface FuzzOutcome {
  /** Case number. */
  readonly id: number;
  /** `ok`: ran and agreed; `typed`: refused with a `KilnError`; `bug`: anything else. */
  readonly status: "ok" | "typed" | "bug";
  /** What was done to the model, and why it is a bug (for `bug`) or which error (for `typed`). */
  readonly detail: string;
  /** Wall time of the case. */
  readonly ms: number;
}

/** Options of {@linkcode fuzzCase}. */
export interface FuzzOptions {
  /** Backends compared with the reference (default `["wasm"]`; the reference always runs). */
  readonly backends?: readonly string[];
  /** Models mutated besides fresh random graphs (ONNX bytes). */
  readonly corpus?: readonly Uint8Array[];
  /** A case slower than this is a bug (default 10 000 ms). */
  readonly budgetMs?: number;
  /** The memory budget per tensor while a case runs (default 16 MiB). */
  readonly maxTensorBytes?: number;
}

type Next = () => number;

const SPECIAL = [NaN, Infinity, -Infinity, 0, -0, 1, -1, 3e38, -3e38, 1e-40, 0.5, -2.5];
/**
 * Special values for graphs with periodic ops or sums. Sin and cos of a number near 3e38 depend on
 * its last bit, and a sum of terms near 3e38 overflows (to +inf, -inf or NaN) depending on its
 * order, which legitimately differs between backends (f32 tiles, f64 accumulators): such inputs
 * test nothing there. Elementwise graphs keep the values near the f32 limit.
 */
const SPECIAL_MODERATE = SPECIAL.filter((v) => !(Math.abs(v) > 1e30 && Number.isFinite(v)));
/** Ops whose results on values near the f32 limit depend on evaluation order or the last bit. */
const ORDER_SENSITIVE = new Set([
  "Sin",
  "Cos",
  "MatMul",
  "Gemm",
  "Conv",
  "ReduceSum",
  "ReduceMean",
  "Softmax",
  "LogSoftmax",
  "LayerNormalization",
  "BatchNormalization",
  "AveragePool",
  "GlobalAveragePool",
  "CumSum",
]);
const DIMS = [0, 1, 2, 3, 7, -1, -5, 2 ** 31, 2 ** 40, 2 ** 53];
const INTS = [-(2 ** 31), -7, -2, -1, 0, 1, 2, 3, 5, 2 ** 31, 2 ** 53];
const FLOATS = [NaN, Infinity, -Infinity, -1, 0, 1e-30, 0.5, 2, 1e30];
const OP_NAMES = [
  ...Object.keys(CONVERTERS),
  "__proto__",
  "toString",
  "constructor",
  "hasOwnProperty",
  "",
  "Nope",
];

/** Runs case `id` of the campaign seeded `seed`. Never throws. */
export async function fuzzCase(
  seed: number,
  id: number,
  options: FuzzOptions = {},
): Promise<FuzzOutcome> {
  const t0 = performance.now();
  const steps: string[] = [];
  // The reference's three runs are the oracle's cost, not kiln's: the budget is for the rest.
  const oracle = { ms: 0 };
  const done = (status: FuzzOutcome["status"], why: string): FuzzOutcome => {
    const ms = performance.now() - t0;
    const budget = options.budgetMs ?? 10_000;
    if (status !== "bug" && ms - oracle.ms > budget) {
      return { id, status: "bug", detail: `${steps.join("; ")}: took ${ms.toFixed(0)} ms`, ms };
    }
    return { id, status, detail: [...steps, why].filter(Boolean).join("; "), ms };
  };
  // Mutants ask for huge tensors; a small budget refuses them at once (exercising the budget)
  // instead of spending minutes on the reference interpreter.
  setMemoryBudget({ maxTensorBytes: options.maxTensorBytes ?? 2 ** 24 });
  try {
    const generated = grammarOf(seed, id);
    if (generated) {
      steps.push(generated.what);
      for (const backend of ["reference", ...options.backends ?? ["wasm"]]) {
        await generated.run(backend);
      }
      return done("ok", "");
    }
    const { graph, feeds } = fuzzInstance(seed, id, options, steps);
    await runEverywhere(seeded(graph), feeds, options.backends ?? ["wasm"], oracle);
    return done("ok", "");
  } catch (e) {
    if (e instanceof KilnError) return done("typed", `${e.code}: ${e.message.split("\n")[0]}`);
    if (e instanceof Mismatch || e instanceof WrongAnswer) return done("bug", e.message);
    const err = e as Error;
    return done("bug", `untyped ${err?.name ?? typeof e}: ${err?.message}\n${err?.stack ?? ""}`);
  } finally {
    setMemoryBudget(undefined);
  }
}

/**
 * `graph` with a seed on each random node that has none. Unseeded, every executable draws anew,
 * so the oracle's runs and a backend's would be compared on different draws: seed 37's case 5930
 * (an Add turned Bernoulli) was reported as wasm disagreeing with the reference, where the two
 * had only drawn different samples.
 */
export function seeded(graph: Graph): Graph {
  const unseeded = (op: string, attrs: Graph["nodes"][number]["attrs"]) =>
    RANDOM_OPS.has(op) && attrs.seed === undefined;
  if (!graph.nodes.some((n) => unseeded(n.op, n.attrs))) return graph;
  return Graph.create({
    ...boundaryOf(graph),
    nodes: graph.nodes.map((n, i) => {
      const spec = nodeSpecOf(graph, n);
      return unseeded(n.op, n.attrs) ? { ...spec, attrs: { ...spec.attrs, seed: i + 1 } } : spec;
    }),
  });
}

/** Share of cases generated from grammars (`fuzz_grammar.ts`) rather than mutated. */
const GRAMMAR_SHARE = 0.2;

/**
 * Case `id` of campaign `seed` when it is a grammar case (drawn from a stream of its own, so the
 * mutated cases are the ones the same seed always gave).
 */
export function grammarOf(seed: number, id: number): GrammarCase | undefined {
  const next = rng(((seed * 1_000_003 + id) ^ 0x9e3779b9) >>> 0);
  return next() < GRAMMAR_SHARE ? grammarCase(next) : undefined;
}

/** What case `id` runs: its graph and inputs (the import may throw: that is its outcome). */
export interface FuzzInstance {
  /** The imported graph. */
  readonly graph: Graph;
  /** Its inputs, salted with special values. */
  readonly feeds: Record<string, HostTensor>;
}

/**
 * Builds case `id` of campaign `seed` without running it (to reproduce a reported case); what was
 * done to the model is appended to `steps`.
 */
export function fuzzInstance(
  seed: number,
  id: number,
  options: FuzzOptions = {},
  steps: string[] = [],
): FuzzInstance {
  const next = rng((seed * 1_000_003 + id) >>> 0);
  const graph = next() < 0.35 ? edgeGraph(next, steps) : mutantGraph(next, steps, options);
  return { graph, feeds: feedsFor(graph, next) };
}

/** Backends disagreeing with the reference. */
class Mismatch extends Error {}

/** A random graph whose shapes may have 0 and 1 dimensions, imported back from ONNX. */
function edgeGraph(next: Next, steps: string[]): Graph {
  const seed = Math.floor(next() * 2 ** 31);
  const c = randomGraph(seed, { maxOps: 12, maxDim: 4 });
  steps.push(`random graph ${seed}`);
  const bytes = toOnnx(c.graph);
  const model = decodeModel(bytes);
  // Edge shapes: some input dimension becomes 0 or 1 (shape inference decides what follows).
  for (const input of model.graph.input) {
    for (const d of input.type?.tensorType?.shape?.dim ?? []) {
      if (next() < 0.15) {
        d.dimValue = next() < 0.5 ? 0 : 1;
        steps.push(`${input.name} dim → ${d.dimValue}`);
      }
    }
  }
  return importModel(decodeModel(encodeModel(model)), { inputShapes: bindShapes(model) });
}

/** A corpus model (or a fresh random graph) after one to three mutations, imported. */
function mutantGraph(next: Next, steps: string[], options: FuzzOptions): Graph {
  const corpus = options.corpus ?? [];
  let bytes: Uint8Array;
  if (corpus.length && next() < 0.5) {
    const i = Math.floor(next() * corpus.length);
    bytes = corpus[i];
    steps.push(`corpus model ${i}`);
  } else {
    const seed = Math.floor(next() * 2 ** 31);
    bytes = toOnnx(randomGraph(seed, { maxOps: 10, maxDim: 5 }).graph);
    steps.push(`random graph ${seed}`);
  }
  const count = 1 + Math.floor(next() * 3);
  let model = decodeModel(bytes);
  for (let i = 0; i < count; i++) {
    if (next() < 0.2) {
      bytes = mutateBytes(encodeModel(model), next, steps);
      model = decodeModel(bytes); // may throw a typed error: that is an outcome
    } else {
      mutateFields(model, next, steps);
      model = decodeModel(encodeModel(model));
    }
  }
  return importModel(model, { inputShapes: bindShapes(model) });
}

/** Symbolic input dimensions bound to 2, so models with them still compile. */
function bindShapes(model: ModelProto): Record<string, number[]> {
  const shapes: Record<string, number[]> = {};
  for (const i of onnxInputs(model)) {
    if (i.dims.some((d) => typeof d === "string")) {
      shapes[i.name] = i.dims.map((d) => (typeof d === "string" ? 2 : d));
    }
  }
  return shapes;
}

const pick = <T>(next: Next, xs: readonly T[]): T => xs[Math.floor(next() * xs.length)];

/** What a field mutation works on: the model, a node picked from it (if any), the stream. */
interface Mutation {
  readonly model: ModelProto;
  readonly node: NodeProto | undefined;
  readonly next: Next;
  readonly steps: string[];
}

/** The field mutations, by the field they change; each describes itself in `steps`. */
const FIELD_MUTATIONS: Readonly<Record<string, (m: Mutation) => void>> = {
  dim: ({ model, next, steps }) => {
    const g = model.graph;
    const infos = [...g.input, ...g.output];
    const dims = infos.length ? pick(next, infos).type?.tensorType?.shape?.dim : undefined;
    const inits = g.initializer.filter((t) => t.dims?.length);
    if (dims?.length && next() < 0.6) {
      const d = pick(next, dims);
      d.dimParam = undefined as unknown as string;
      d.dimValue = pick(next, DIMS);
      steps.push(`value dim → ${d.dimValue}`);
    } else if (inits.length) {
      const t = pick(next, inits);
      const at = Math.floor(next() * t.dims!.length);
      t.dims![at] = pick(next, DIMS);
      steps.push(`initializer ${t.name} dim ${at} → ${t.dims![at]}`);
    }
  },
  elemType: ({ model, next, steps }) => {
    const g = model.graph;
    const code = Math.floor(next() * 18);
    const infos = [...g.input, ...g.output];
    if (infos.length && next() < 0.5) {
      const tt = pick(next, infos).type?.tensorType;
      if (tt) tt.elemType = code;
    } else if (g.initializer.length) pick(next, g.initializer).dataType = code;
    steps.push(`element type → ${code}`);
  },
  attribute: ({ node, next, steps }) => {
    if (!node) return;
    const a = node.attribute.length ? pick(next, node.attribute) : undefined;
    const how = pick(next, ["int", "float", "ints", "drop", "rename", "add", "type"]);
    steps.push(`${node.opType} attribute ${a?.name ?? "(none)"}: ${how}`);
    if (how === "add" || !a) {
      node.attribute.push({
        name: pick(next, ["axis", "alpha", "perm", "bogus"]),
        type: 2,
        i: 1,
      });
    } else if (how === "int") a.i = pick(next, INTS);
    else if (how === "float") a.f = pick(next, FLOATS);
    else if (how === "ints") {
      a.ints = [...Array(Math.floor(next() * 6))].map(() => pick(next, INTS));
    } else if (how === "drop") node.attribute.splice(node.attribute.indexOf(a), 1);
    else if (how === "rename") a.name = pick(next, ["axis", "axes", "perm", "", "x"]);
    else a.type = Math.floor(next() * 16);
  },
  input: ({ model, node, next, steps }) => {
    const g = model.graph;
    if (!node) return;
    const how = pick(next, ["drop", "duplicate", "empty", "unknown", "later", "swap"]);
    steps.push(`${node.opType} inputs: ${how}`);
    const at = Math.floor(next() * Math.max(1, node.input.length));
    if (how === "drop") node.input.splice(at, 1);
    else if (how === "duplicate") node.input.push(node.input[at] ?? "x0");
    else if (how === "empty") node.input[at] = "";
    else if (how === "unknown") node.input[at] = "nowhere";
    else if (how === "later") node.input[at] = g.node.at(-1)!.output[0] ?? "";
    else node.input.reverse();
  },
  output: ({ model, node, next, steps }) => {
    const g = model.graph;
    if (!node) return;
    const other = pick(next, g.node).output[0] ?? "";
    node.output[0] = next() < 0.5 ? other : pick(next, ["", g.input[0]?.name ?? "x"]);
    steps.push(`${node.opType} output → "${node.output[0]}"`);
  },
  opType: ({ node, next, steps }) => {
    if (!node) return;
    const from = node.opType;
    node.opType = pick(next, OP_NAMES);
    steps.push(`op ${from} → ${node.opType}`);
  },
  order: ({ model, next, steps }) => {
    const g = model.graph;
    if (g.node.length < 2) return;
    const [i, j] = [Math.floor(next() * g.node.length), Math.floor(next() * g.node.length)];
    [g.node[i], g.node[j]] = [g.node[j], g.node[i]];
    if (next() < 0.3) g.node.splice(i, 1);
    steps.push(`node order ${i} ↔ ${j}`);
  },
  initializer: ({ model, next, steps }) => {
    const g = model.graph;
    const t = g.initializer.length ? pick(next, g.initializer) : undefined;
    if (!t) return;
    const raw = t.rawData;
    if (raw?.length && next() < 0.5) {
      t.rawData = raw.slice(0, Math.floor(next() * raw.length));
      steps.push(`initializer ${t.name} truncated`);
    } else {
      t.dims = [...Array(Math.floor(next() * 4))].map(() => pick(next, DIMS));
      steps.push(`initializer ${t.name} dims → [${t.dims}]`);
    }
  },
  opset: ({ model, next, steps }) => {
    const v = pick(next, [0, 1, 6, 7, 11, 13, 17, 21, 22, 99]);
    model.opsetImport = [{ domain: "", version: v }];
    steps.push(`opset → ${v}`);
  },
};

/** One field-level mutation of `model`, in place, described in `steps`. */
function mutateFields(model: ModelProto, next: Next, steps: string[]): void {
  const g = model.graph;
  const node = g.node.length ? pick(next, g.node) : undefined;
  const kind = pick(next, [
    "dim",
    "dim",
    "elemType",
    "attribute",
    "attribute",
    "attribute",
    "input",
    "input",
    "output",
    "opType",
    "order",
    "initializer",
    "opset",
  ]);
  FIELD_MUTATIONS[kind]({ model, node, next, steps });
}

/** One byte-level mutation of `bytes` (a copy), described in `steps`. */
function mutateBytes(bytes: Uint8Array, next: Next, steps: string[]): Uint8Array {
  const out = bytes.slice();
  const at = () => Math.floor(next() * Math.min(out.length, next() < 0.7 ? 2048 : out.length));
  switch (pick(next, ["flip", "truncate", "varint", "length"])) {
    case "flip": {
      const i = at();
      out[i] ^= 1 << Math.floor(next() * 8);
      steps.push(`bit flip at ${i}`);
      return out;
    }
    case "truncate": {
      const n = Math.floor(next() * out.length);
      steps.push(`truncated to ${n} bytes`);
      return out.slice(0, n);
    }
    case "varint": {
      // An over-long run of continuation bytes where a varint starts.
      const i = at();
      const run = new Uint8Array(1 + Math.floor(next() * 12)).fill(0xff);
      steps.push(`${run.length} continuation bytes at ${i}`);
      return new Uint8Array([...out.slice(0, i), ...run, 0x01, ...out.slice(i)]);
    }
    default: {
      // A huge length for the graph field (2^32 + small, read modulo 2^32 by naive decoders).
      steps.push("appended graph field with a 2^32+ length");
      return new Uint8Array([...out, 0x3a, 0x85, 0x80, 0x80, 0x80, 0x10, 0x00]);
    }
  }
}

/** Input data for a run: random values salted with special ones. */
function feedsFor(graph: Graph, next: Next): Record<string, HostTensor> {
  const feeds: Record<string, HostTensor> = {};
  const sensitive = graph.nodes.some((n) => ORDER_SENSITIVE.has(n.op));
  const specials = sensitive ? SPECIAL_MODERATE : SPECIAL;
  for (const input of graph.inputs) {
    const n = input.shape.reduce((a, b) => a * b, 1);
    const data: TensorData = allocate(input.dtype, n);
    for (let i = 0; i < n; i++) {
      if (data instanceof BigInt64Array) data[i] = BigInt(Math.floor(next() * 7) - 3);
      else if (input.dtype === "f32" || input.dtype === "f16") {
        const v = next() < 0.15 ? pick(next, specials) : next() * 8 - 4;
        (data as Float32Array)[i] = input.dtype === "f16" ? 0x3c00 : v;
      } else if (input.dtype === "bool") data[i] = next() < 0.5 ? 1 : 0;
      else data[i] = Math.floor(next() * 7) - (input.dtype.startsWith("u") ? 0 : 3);
    }
    feeds[input.name] = { data, shape: input.shape, dtype: input.dtype };
  }
  return feeds;
}

/**
 * Past about 1e37 an f32 computation is at the mercy of its evaluation order: one backend's
 * intermediate overflows to ±inf (and inf - inf is NaN) where another's wider sum does not. Two
 * results both in that regime agree; a NaN or infinity against an ordinary number never does.
 */
function overflowed(x: number): boolean {
  return !Number.isFinite(x) || Math.abs(x) > 1e37;
}

/**
 * Runs `graph` once on `feeds` with compile options `options`; with `into`, once more into the
 * caller's arrays (other values in them first), which must then hold the first run's outputs.
 */
async function runOnce(
  graph: Graph,
  feeds: Record<string, HostTensor>,
  options: CompileOptions,
  into = false,
): Promise<Record<string, HostTensor>> {
  const exe = await compile(graph, { ...options, cache: false });
  try {
    const first = await exe.run(feeds);
    if (!into) return first;
    const fill = (d: TensorData) =>
      d instanceof BigInt64Array ? d.slice().fill(7n) : d.slice().fill(7);
    const arrays = Object.fromEntries(Object.entries(first).map(([k, t]) => [k, fill(t.data)]));
    const again = await exe.run(feeds, { into: arrays });
    for (const [name, t] of Object.entries(first)) {
      const [a, b] = [again[name].data as ArrayLike<unknown>, t.data as ArrayLike<unknown>];
      const bad = Array.from(b).findIndex((x, i) => !Object.is(a[i], x));
      if (again[name].data !== arrays[name] || bad >= 0) {
        throw new Mismatch(`${options.backend} ${name}[${bad}] read into the caller's array`);
      }
    }
    return first;
  } finally {
    exe.dispose();
  }
}

/** Numbers of a tensor: the values of f16 and bf16 bits, not the bits. */
function numbersOf(t: HostTensor): number[] {
  const bits = t.data as ArrayLike<number>;
  if (t.dtype === "f16") return Array.from(bits, fromF16Bits);
  if (t.dtype === "bf16") return Array.from(bits, fromBf16Bits);
  return Array.from(t.data as ArrayLike<number | bigint>, Number);
}

/**
 * The relative tolerance of outputs of `dtype`, 0 for integers: 1e-3 for f32, and two units in the
 * last place of the 16-bit floats, to which values that differ in f32's last places (another
 * summation order) can round apart: a product rounded to bfloat16 came out one unit apart, and
 * its bits (15895 against 15896) had been compared as integers.
 */
function tolerance(dtype: string): number {
  return dtype === "bf16" ? 2 ** -6 : dtype === "f16" ? 2 ** -9 : dtype === "f32" ? 1e-3 : 0;
}

/** Whether `a` and `e` agree within relative tolerance `rtol` (0: exactly). */
function agree(a: number, e: number, rtol: number): boolean {
  return isClose(a, e, rtol ? 1e-4 : 0, rtol) || (rtol > 0 && overflowed(a) && overflowed(e));
}

/** `feeds` with `f` applied to every f32 element, in order (other dtypes untouched). */
function mapF32(
  feeds: Record<string, HostTensor>,
  f: (v: number) => number,
): Record<string, HostTensor> {
  return Object.fromEntries(
    Object.entries(feeds).map((
      [k, t],
    ) => [k, t.dtype === "f32" ? { ...t, data: (t.data as Float32Array).map(f) } : t]),
  );
}

/** `feeds` with every float nudged by a relative 2^-20 at random (integers untouched). */
function perturbed(feeds: Record<string, HostTensor>): Record<string, HostTensor> {
  const next = rng(0x5eed);
  return mapF32(feeds, (v) => v * (1 + (next() * 2 - 1) * 2 ** -20));
}

/** `feeds` with every subnormal f32 flushed to a zero of its sign, or `undefined` if none is. */
function flushed(feeds: Record<string, HostTensor>): Record<string, HostTensor> | undefined {
  const tiny = (v: number) => v !== 0 && Math.abs(v) < 2 ** -126;
  const any = Object.values(feeds).some((t) =>
    t.dtype === "f32" && (t.data as Float32Array).some(tiny)
  );
  return any ? mapF32(feeds, (v) => tiny(v) ? (v < 0 ? -0 : 0) : v) : undefined;
}

/**
 * Compiles and runs `graph` on the reference (fused: the oracle) and on `backends`, comparing
 * every output. Where the answer itself is ill-conditioned there is no single right one, and the
 * element is not compared: when the reference's node-by-node run disagrees with it (another
 * evaluation order), or when inputs nudged by a relative 2^-20 move it past the tolerance (a sum
 * that cancels 3e38 against -3e38, sin of a huge argument, tan near a pole, a comparison of two
 * values a rounding apart), or sums nudged by two units in the last place (`jitter.ts`), and on
 * webgpu when flushing subnormal inputs moves it (see {@linkcode flushed}).
 */
async function runEverywhere(
  graph: Graph,
  feeds: Record<string, HostTensor>,
  backends: readonly string[],
  oracle: { ms: number },
): Promise<void> {
  const t0 = performance.now();
  const want = await runOnce(graph, feeds, { backend: "reference" });
  const orders = await runOnce(graph, feeds, { fuse: false });
  const nudged = await runOnce(graph, perturbed(feeds), { backend: "reference" });
  const up = await runOnce(jittered(graph, 1), feeds, { backend: "reference" });
  const down = await runOnce(jittered(graph, -1), feeds, { backend: "reference" });
  // WGSL lets a GPU flush subnormal f32 to zero (NVIDIA does; documented): where flushing the
  // inputs' subnormals changes the reference's answer, webgpu's is not compared.
  const flat = flushed(feeds);
  const flushedWant = flat && backends.includes("webgpu")
    ? await runOnce(graph, flat, { backend: "reference" })
    : undefined;
  oracle.ms += performance.now() - t0;
  for (const backend of backends) {
    // A random op's values move on from run to run (seeded per executable, as ONNX Runtime's).
    const again = !graph.nodes.some((n) => RANDOM_OPS.has(n.op));
    const got = await runOnce(graph, feeds, { backend }, again);
    for (const [name, w] of Object.entries(want)) {
      const g = got[name];
      if (!g || g.shape.join() !== w.shape.join() || g.dtype !== w.dtype) {
        throw new Mismatch(`${backend} ${name}: ${g?.dtype}[${g?.shape}] ≠ ${w.dtype}[${w.shape}]`);
      }
      const [a, e] = [numbersOf(g), numbersOf(w)];
      const [o, n, u, d] = [orders, nudged, up, down].map((r) => numbersOf(r[name]));
      const f = backend === "webgpu" && flushedWant ? numbersOf(flushedWant[name]) : undefined;
      const rtol = tolerance(w.dtype);
      // Stability is judged strictly: NaN in one order and ±inf in the other is unstable.
      const same = (x: number, y: number) => isClose(x, y, rtol ? 1e-4 : 0, rtol);
      const stable = (i: number) =>
        [o, n, u, d].every((r) => same(r[i], e[i])) && (!f || same(f[i], e[i]));
      const bad = e.findIndex((x, i) => stable(i) && !agree(a[i], x, rtol));
      if (bad >= 0) {
        throw new Mismatch(`${backend} ${name}[${bad}] = ${a[bad]}, reference ${e[bad]}`);
      }
    }
  }
}

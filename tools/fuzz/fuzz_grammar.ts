/**
 * Models generated from grammars of the shapes that a field mutator does not reach: nested
 * control flow, variadic nodes with thousands of inputs, int64 arithmetic near the limits of
 * 32 and 64 bits, quantized integer products whose sums pass 2^24, and external-data locations written every way a path can leave its folder
 * (weights inside the folder are 1, 2, 3, 4; a secret outside it, behind links, is 666). Each
 * case carries its own oracle (the exact answer, in BigInt where it is an integer) instead of the
 * reference backend's: an answer that differs, an untyped error, or a byte read from outside the
 * model's folder is a bug; a typed error is an accepted refusal.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import { rng } from "../../jit/support/random.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { OnnxModel } from "../../onnx/model.ts";
import { encodeModel, type ModelProto } from "../../onnx/wire/proto.ts";
import { valueInfo } from "../../onnx/testdata.ts";

type Next = () => number;
type Graph = ModelProto["graph"];
type Node = Graph["node"][number];
type Tensor = Graph["initializer"][number];

/** One generated case: a model, its inputs and what every backend must answer. */
export interface GrammarCase {
  /** What was generated (for the report and reproduction). */
  readonly what: string;
  /** Runs the case on `backend`: resolves when the answer is right, throws otherwise. */
  run(backend: string): Promise<void>;
}

/** An answer that is neither right nor a typed refusal. */
export class WrongAnswer extends Error {}

const pick = <T>(next: Next, xs: readonly T[]): T => xs[Math.floor(next() * xs.length)];

const value = valueInfo;

function bytesOf(graph: Omit<Graph, "name">): Uint8Array {
  return encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: { name: "grammar", ...graph },
  });
}

/** Runs `bytes` on `feeds` and compares output `y` with `want` exactly. */
async function expectY(
  backend: string,
  bytes: Uint8Array,
  feeds: Record<string, HostTensor>,
  want: readonly (number | bigint)[],
): Promise<void> {
  const model = OnnxModel.fromBytes(bytes);
  try {
    const { y } = await model.run(feeds, { backend, cache: false });
    const got = Array.from(y.data as ArrayLike<number | bigint>);
    const same = got.length === want.length &&
      got.every((v, i) => Object.is(v, want[i]) || v === want[i]);
    if (!same) {
      throw new WrongAnswer(
        `y = [${got.slice(0, 8).join(", ")}${got.length > 8 ? ", …" : ""}], want [${
          want.slice(0, 8).join(", ")
        }${want.length > 8 ? ", …" : ""}]`,
      );
    }
  } finally {
    model.dispose();
  }
}

const f32 = (values: number[]): HostTensor => ({
  data: Float32Array.from(values),
  shape: [values.length],
  dtype: "f32",
});

/** A Loop of `trips` around `inner` (v -> v2), carrying one f32 value. */
function loopNode(inner: Node, trips: string, input: string, output: string): Node {
  return {
    opType: "Loop",
    input: [trips, "T", input],
    output: [output],
    attribute: [{
      name: "body",
      type: 5,
      g: {
        name: "body",
        input: [value("i", 7, []), value("c", 9, []), value("v", 1, [1])],
        output: [value("c2", 9, []), value("v2", 1, [1])],
        initializer: [],
        node: [{ opType: "Identity", input: ["c"], output: ["c2"], attribute: [] }, inner],
      },
    }],
  };
}

/** Loops nested one to three deep, each of 0 to 4000 trips, adding one per innermost body. */
function nestedLoops(next: Next): GrammarCase {
  const trips = Array.from(
    { length: 1 + Math.floor(next() * 3) },
    () => pick(next, [0, 1, 2, 7, 60, 300, 4000]),
  );
  let node: Node = { opType: "Add", input: ["v", "one"], output: ["v2"], attribute: [] };
  trips.forEach((_, depth) => {
    const last = depth === trips.length - 1;
    node = loopNode(node, `M${depth}`, last ? "x" : "v", last ? "y" : "v2");
  });
  const bytes = bytesOf({
    input: [value("x", 1, [1])],
    output: [value("y", 1, [1])],
    initializer: [
      ...trips.map((t, i): Tensor => ({ name: `M${i}`, dims: [], dataType: 7, int64Data: [t] })),
      { name: "T", dims: [], dataType: 9, int32Data: [1] },
      { name: "one", dims: [1], dataType: 1, floatData: [1] },
    ],
    node: [node],
  });
  const total = trips.reduce((a, b) => a * b, 1);
  return {
    what: `loops of ${trips.join(" × ")} trips`,
    run: (backend) => expectY(backend, bytes, { x: f32([0.5]) }, [0.5 + total]),
  };
}

/** Concat, Sum, Max, Min or Mean over 1 to 5000 inputs (a few graph inputs repeated). */
function wideVariadic(next: Next): GrammarCase {
  const op = pick(next, ["Concat", "Sum", "Max", "Min", "Mean"]);
  const n = pick(next, [1, 2, 3, 17, 257, 5000]);
  const distinct = Math.min(n, 1 + Math.floor(next() * 3));
  const values = Array.from({ length: distinct }, () => pick(next, [-3, -0.5, 0, 1, 2.25, 4]));
  const names = Array.from({ length: n }, (_, i) => `x${i % distinct}`);
  const concat = op === "Concat";
  const bytes = bytesOf({
    input: values.map((_, i) => value(`x${i}`, 1, [1])),
    output: [value("y", 1, [concat ? n : 1])],
    initializer: [],
    node: [{
      opType: op,
      input: names,
      output: ["y"],
      attribute: concat ? [{ name: "axis", type: 2, i: 0 }] : [],
    }],
  });
  const each = names.map((name) => values[Number(name.slice(1))]);
  const sum = each.reduce((a, b) => Math.fround(a + b), 0);
  const want = concat ? each : [
    op === "Sum"
      ? sum
      : op === "Mean"
      ? Math.fround(sum / n)
      : op === "Max"
      ? Math.max(...values)
      : Math.min(...values),
  ];
  const feeds = Object.fromEntries(values.map((v, i) => [`x${i}`, f32([v])]));
  return { what: `${op} of ${n} inputs`, run: (backend) => expectY(backend, bytes, feeds, want) };
}

/** int64 values at and past the edges of 32 bits, and 53 and 64 bits. */
const INT64_EDGES = [
  0n,
  1n,
  -1n,
  7n,
  46340n,
  46341n,
  100000n,
  2n ** 31n - 1n,
  2n ** 31n,
  -(2n ** 31n),
  -(2n ** 31n) - 1n,
  2000000000n,
  2n ** 32n + 1n,
  2n ** 53n + 1n,
  2n ** 63n - 1n,
  -(2n ** 63n),
];

/** The int64 result ONNX defines (two's complement wrapping at 64 bits). */
function int64Of(op: string, a: bigint, b: bigint): bigint | undefined {
  const r = op === "Add"
    ? a + b
    : op === "Sub"
    ? a - b
    : op === "Mul"
    ? a * b
    : op === "Div"
    ? (b === 0n ? undefined : a / b)
    : op === "Neg"
    ? -a
    : a < 0n
    ? -a
    : a;
  return r === undefined ? undefined : BigInt.asIntN(64, r);
}

/** An int64 op on values near the limits, as inputs or as folded initializers. */
function int64Edges(next: Next): GrammarCase {
  const op = pick(next, ["Add", "Sub", "Mul", "Div", "Neg", "Abs", "ReduceSum", "CastF32"]);
  const n = 1 + Math.floor(next() * 3);
  const draw = () => Array.from({ length: n }, () => pick(next, INT64_EDGES));
  const [a, b] = [draw(), draw().map((v) => (op === "Div" && v === 0n ? 3n : v))];
  const folded = next() < 0.3;
  const tensor = (name: string, v: bigint[]): Tensor => ({
    name,
    dims: [n],
    dataType: 7,
    int64Data: v,
  });
  const unary = op === "Neg" || op === "Abs" || op === "ReduceSum" || op === "CastF32";
  const inputs = op === "CastF32" ? ["f"] : unary ? ["a"] : ["a", "b"];
  const node: Node = op === "CastF32"
    ? { opType: "Cast", input: ["f"], output: ["y"], attribute: [{ name: "to", type: 2, i: 7 }] }
    : {
      opType: op,
      input: inputs,
      output: ["y"],
      attribute: op === "ReduceSum" ? [{ name: "keepdims", type: 2, i: 0 }] : [],
    };
  const floats = a.map((v) => Math.fround(Number(v)));
  const want = op === "CastF32"
    ? floats.map((v) => BigInt.asIntN(64, BigInt(v)))
    : op === "ReduceSum"
    ? [BigInt.asIntN(64, a.reduce((s, v) => s + v, 0n))]
    : a.map((v, i) => int64Of(op, v, b[i])!);
  const feeds: Record<string, HostTensor> = {};
  const initializer: Tensor[] = [];
  if (op === "CastF32") feeds.f = f32(floats);
  else {
    for (const [name, v] of [["a", a], ["b", b]] as const) {
      if (!inputs.includes(name)) continue;
      if (folded) initializer.push(tensor(name, v));
      else feeds[name] = { data: BigInt64Array.from(v), shape: [n], dtype: "i64" };
    }
  }
  const bytes = bytesOf({
    input: Object.keys(feeds).map((k) => value(k, k === "f" ? 1 : 7, [n])),
    output: [value("y", 7, op === "ReduceSum" ? [] : [n])],
    initializer,
    node: [node],
  });
  return {
    what: `int64 ${op} of [${a}]${unary ? "" : ` and [${b}]`}${folded ? " (folded)" : ""}`,
    run: (backend) => expectY(backend, bytes, feeds, want),
  };
}

/** Path pieces a location is made of: inside names, links out, climbs and schemes. */
const PIECES = [
  "data.bin",
  "sub",
  "sub/data.bin",
  "inlink.bin",
  "flink.bin",
  "link",
  "link/secret.bin",
  "..",
  ".",
  "%2e%2e",
  "%2E%2e",
  "..%2f",
  "%2f",
  "outside",
  "secret.bin",
  "file:",
  "C:",
  "",
  "%00",
];

/** A location drawn from the grammar; `root` is the case's folder, `other` another origin. */
function location(next: Next, root: string, other: string): string {
  const kind = next();
  if (kind < 0.1) return `file://${root}/outside/secret.bin`;
  if (kind < 0.15) return `${root}/outside/secret.bin`;
  if (kind < 0.2) return `${other}/secret.bin`;
  if (kind < 0.25) return `//${other.replace(/^https?:\/\//, "")}/secret.bin`;
  const parts = Array.from({ length: 1 + Math.floor(next() * 4) }, () => pick(next, PIECES));
  return parts.join(next() < 0.8 ? "/" : "\\");
}

/** The model: y = x + w, with w's four f32 values in external file `where`. */
function modelBytes(where: string): Uint8Array {
  const dim = { dim: [{ dimValue: 4 }] };
  return encodeModel({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "external",
      input: [{ name: "x", type: { tensorType: { elemType: 1, shape: dim } } }],
      output: [{ name: "y", type: { tensorType: { elemType: 1, shape: dim } } }],
      initializer: [{
        name: "w",
        dims: [4],
        dataType: 1,
        dataLocation: 1,
        externalData: [{ key: "location", value: where }, { key: "offset", value: "0" }],
      }],
      node: [{ opType: "Add", input: ["x", "w"], output: ["y"], attribute: [] }],
    },
  });
}

const floats = (xs: number[]) => new Uint8Array(Float32Array.from(xs).buffer);

/** Lays out the case's folder: the model, its data, a secret outside and links out and in. */
async function layout(root: string, model: Uint8Array): Promise<void> {
  await Deno.mkdir(`${root}/outside`);
  await Deno.mkdir(`${root}/model/sub`, { recursive: true });
  await Deno.writeFile(`${root}/outside/secret.bin`, floats([666, 666, 666, 666]));
  await Deno.writeFile(`${root}/model/data.bin`, floats([1, 2, 3, 4]));
  await Deno.writeFile(`${root}/model/sub/data.bin`, floats([1, 2, 3, 4]));
  await Deno.writeFile(`${root}/model/m.onnx`, model);
  await Deno.symlink(`${root}/outside`, `${root}/model/link`);
  await Deno.symlink(`${root}/outside/secret.bin`, `${root}/model/flink.bin`);
  await Deno.symlink(`${root}/model/data.bin`, `${root}/model/inlink.bin`);
}

/** Serves `root` on 127.0.0.1 (links not followed), recording every path asked for in `seen`. */
function serve(root: string, seen: string[]) {
  return Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, async (r) => {
    const path = decodeURIComponent(new URL(r.url).pathname);
    seen.push(path);
    // Links are the file system's to judge, not a URL's: the server serves no link, so what
    // comes back over http is what the URL names.
    const real = await Deno.realPath(`${root}${path}`).catch(() => "");
    const link = real !== `${await Deno.realPath(root)}${path}`;
    const file = link ? undefined : await Deno.readFile(`${root}${path}`).catch(() => undefined);
    return new Response(file ? file.slice() : null, { status: file ? 200 : 404 });
  });
}

/** Loads and runs the model, then checks what came back and what was read. */
async function loadAndRun(backend: string, from: string): Promise<void> {
  const model = await OnnxModel.load(from);
  try {
    const x = { data: Float32Array.from([0.5, 0.5, 0.5, 0.5]), shape: [4], dtype: "f32" as const };
    const { y } = await model.run({ x }, { backend, cache: false });
    const got = [...y.data as Float32Array];
    if (got.join() !== "1.5,2.5,3.5,4.5") throw new WrongAnswer(`y = [${got}]`);
  } finally {
    model.dispose();
  }
}

/** An external-data case: a location from the grammar, loaded from a path or over http. */
export function externalData(next: Next): GrammarCase {
  const overHttp = next() < 0.4;
  const draw = next() * 2 ** 31;
  return {
    what: `external data ${overHttp ? "over http" : "from a path"} (draw ${draw})`,
    async run(backend) {
      const root = await Deno.makeTempDir({ prefix: "kiln-fuzz-" });
      const seen: string[] = [], elsewhere: string[] = [];
      const server = serve(root, seen);
      const other = serve(root, elsewhere);
      const otherUrl = `http://127.0.0.1:${other.addr.port}`;
      const where = location(rng(draw), root, otherUrl);
      try {
        await layout(root, modelBytes(where));
        const from = overHttp
          ? `http://127.0.0.1:${server.addr.port}/model/m.onnx`
          : `${root}/model/m.onnx`;
        await loadAndRun(backend, from).catch((e) => {
          if (!(e instanceof KilnError)) throw e;
        });
        const outside = seen.filter((p) => !p.startsWith("/model/"));
        if (outside.length || elsewhere.length) {
          throw new WrongAnswer(
            `location "${where}" read ${[...outside, ...elsewhere.map((p) => `other ${p}`)]}`,
          );
        }
      } catch (e) {
        if (e instanceof WrongAnswer) e.message = `location "${where}": ${e.message}`;
        throw e;
      } finally {
        await server.shutdown();
        await other.shutdown();
        await Deno.remove(root, { recursive: true });
      }
    },
  };
}

/** An 8-bit type's range, its ONNX code and its bytes. */
const EIGHT_BIT = {
  u8: { lo: 0, hi: 255, code: 2, bytes: (v: number[]) => Uint8Array.from(v) },
  i8: {
    lo: -128,
    hi: 127,
    code: 3,
    bytes: (v: number[]) => new Uint8Array(Int8Array.from(v).buffer),
  },
} as const;

/**
 * A quantized integer product (MatMulInteger or ConvInteger) of random shapes, 8-bit types and
 * zero points (per tensor, or per column of B), its values drawn towards the types' ends so the
 * sums pass 2^24: the int32 sums must be exact on every backend (the integer tiles, the exact
 * float chunks, the grouped convolutions).
 */
function integerProducts(next: Next): GrammarCase {
  const int = (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1));
  const [at, bt] = [pick(next, ["u8", "i8"] as const), pick(next, ["u8", "i8"] as const)];
  const draw = (t: "u8" | "i8", n: number) =>
    Array.from({ length: n }, () => {
      const { lo, hi } = EIGHT_BIT[t], u = next();
      return u < 0.35 ? lo : u < 0.7 ? hi : int(lo, hi);
    });
  const tensor = (name: string, t: "u8" | "i8", dims: number[], v: number[]): Tensor => ({
    name,
    dims,
    dataType: EIGHT_BIT[t].code,
    rawData: EIGHT_BIT[t].bytes(v),
  });
  const az = next() < 0.6 ? draw(at, 1) : undefined;
  const conv = next() < 0.3;
  const [m, n] = conv ? [int(1, 4), 1] : [int(1, 9), int(1, 20)];
  const k = conv ? int(1, 64) : int(1, 700);
  const taps = conv ? [int(1, 3), int(1, 3)] : [];
  const size = conv ? [int(taps[0], 5), int(taps[1], 5)] : [];
  const rows = conv ? 1 : (next() < 0.3 ? int(1, 3) : 1) * m;
  const a = draw(at, rows * k * (conv ? size[0] * size[1] : 1));
  const b = draw(bt, conv ? m * k * taps[0] * taps[1] : k * n);
  const bz = next() < 0.5 ? draw(bt, !conv && next() < 0.5 ? n : 1) : undefined;
  const want = conv
    ? convSums(a, b, { k, m, size, taps, az: az?.[0] ?? 0, bz: bz?.[0] ?? 0 })
    : Array.from({ length: rows * n }, (_, o) => {
      const [r, j] = [Math.floor(o / n), o % n];
      let sum = 0;
      for (let p = 0; p < k; p++) {
        sum += (a[r * k + p] - (az?.[0] ?? 0)) *
          (b[p * n + j] - (bz?.[bz.length > 1 ? j : 0] ?? 0));
      }
      return sum;
    });
  const aShape = conv ? [1, k, ...size] : rows === m ? [m, k] : [rows / m, m, k];
  const bShape = conv ? [m, k, ...taps] : [k, n];
  const initializer = [tensor("b", bt, bShape, b)];
  if (az) initializer.push(tensor("az", at, [], az));
  if (bz) initializer.push(tensor("bz", bt, bz.length > 1 ? [n] : [], bz));
  const node: Node = {
    opType: conv ? "ConvInteger" : "MatMulInteger",
    input: ["a", "b", az ? "az" : "", ...(bz ? ["bz"] : [])],
    output: ["y"],
    attribute: [],
  };
  const data = at === "i8" ? Int8Array.from(a) : Uint8Array.from(a);
  const feeds = { a: { data, shape: aShape, dtype: at } as HostTensor };
  const bytes = bytesOf({
    input: [value("a", EIGHT_BIT[at].code, aShape)],
    output: [value("y", 6)],
    initializer,
    node: [node],
  });
  return {
    what: `${node.opType} ${at} [${aShape}] × ${bt} [${bShape}]${az ? ", a zero point" : ""}${
      bz ? `, ${bz.length > 1 ? "column" : "a"} zero point${bz.length > 1 ? "s" : ""} of b` : ""
    }`,
    run: (backend) => expectY(backend, bytes, feeds, want),
  };
}

/** A ConvInteger's exact sums: x [1, k, H, W] by w [m, k, kh, kw], no padding, stride 1. */
function convSums(
  x: number[],
  w: number[],
  { k, m, size, taps, az, bz }: {
    k: number;
    m: number;
    size: number[];
    taps: number[];
    az: number;
    bz: number;
  },
): number[] {
  const [h, wd] = size, [kh, kw] = taps, [oh, ow] = [h - kh + 1, wd - kw + 1];
  const out: number[] = [];
  for (let o = 0; o < m; o++) {
    for (let y = 0; y < oh; y++) {
      for (let z = 0; z < ow; z++) {
        let sum = 0;
        for (let c = 0; c < k; c++) {
          for (let i = 0; i < kh; i++) {
            for (let j = 0; j < kw; j++) {
              const xv = x[(c * h + y + i) * wd + z + j] - az;
              sum += xv * (w[((o * k + c) * kh + i) * kw + j] - bz);
            }
          }
        }
        out.push(sum);
      }
    }
  }
  return out;
}

/** The grammars, each drawn with the same chance. */
const GRAMMARS: readonly ((next: Next) => GrammarCase)[] = [
  nestedLoops,
  wideVariadic,
  int64Edges,
  integerProducts,
];

/** A generated case; `files` adds the external-data grammar (it writes temporary folders). */
export function grammarCase(next: Next, files = true): GrammarCase {
  if (files && next() < 0.25) return externalData(next);
  return pick(next, GRAMMARS)(next);
}

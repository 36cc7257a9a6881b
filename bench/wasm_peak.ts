/**
 * The host's WebAssembly SIMD peak, per thread and on every thread, beside kiln's transformer
 * products (issue 52 measures each matmul of BERT-base and GPT-2 small against it).
 *
 * The peak is a hand-written kernel built with kiln's module builder: `CHAINS` independent
 * chains of f32x4 multiply-adds over registers, looped, nothing read or written (relaxed SIMD's
 * `f32x4.relaxed_madd` where the engine has it, else a multiply and an add); the integer peak
 * the same with `i32x4.dot_i16x8_s` and an add (the pair kiln's integer tiles issue). Ops count
 * two a multiply-add. Each thread is a worker running the kernel at once; the aggregate is their
 * work over the slowest's time.
 *
 * The products: each matmul of BERT-base and GPT-2 small at 128 tokens ([128 × K] by a constant
 * [K × N]; attention's per head), and the weights' products again as dynamic int8 (MatMulInteger
 * of u8 by i8), compiled by kiln on wasm with one thread and with `--threads` (default: every
 * core), median of the runs after warm-up; GFLOP/s (GOP/s for int8) and the share of the peak of
 * as many threads (f32's, or the integer dot's).
 *
 *   deno run -A --config deno.json bench/wasm_peak.ts [--threads N] [--runs 20] [--json] [--peak-only]
 *
 * @module
 */
import { compile, GraphBuilder, WasmBackend } from "../mod.ts";
import { wasm } from "../shaders/wasm/encoder.ts";
import { hasRelaxedSimd } from "../backends/wasm/wasm_backend.ts";
import { median, wallTimes } from "./timed.ts";

const arg = (name: string) => {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Deno.args[i + 1] : undefined;
};
const runs = Number(arg("--runs") ?? 20);
const json = Deno.args.includes("--json");

/** Independent chains a peak kernel keeps in flight: enough to cover an FMA's latency twice. */
const CHAINS = 12;
/** Iterations of a timed peak loop (each `CHAINS` vector multiply-adds). */
const ITERS = 4_000_000;

/** What a peak kernel multiplies: f32 lanes, i16 pairs (`dot_i16x8_s`), i8 quads (relaxed dot). */
type Kind = "f32" | "i16" | "i8";

/** The peak kernel's module: `run(iters)` loops `CHAINS` chains of `kind`'s multiply-adds. */
function peakModule(kind: Kind): Uint8Array {
  const m = new wasm.Module();
  const { v128, i32 } = wasm;
  const acc = (c: number) => 1 + c;
  const [x, y] = [1 + CHAINS, 2 + CHAINS];
  const get = (l: number) => m.local.get(l, v128);
  const relaxed = kind === "f32" && hasRelaxedSimd();
  // Each step reads its chain's value (acc · y + x, acc + dot(acc, y)), so that no product is
  // loop-invariant for the engine to hoist.
  const step = (c: number) =>
    m.local.set(
      acc(c),
      kind === "i8"
        ? m.i32x4.relaxed_dot_i8x16_i7x16_add_s(get(acc(c)), get(y), get(acc(c)))
        : kind === "i16"
        ? m.i32x4.add(get(acc(c)), m.i32x4.dot_i16x8_s(get(acc(c)), get(y)))
        : relaxed
        ? m.f32x4.relaxed_madd(get(acc(c)), get(y), get(x))
        : m.f32x4.add(m.f32x4.mul(get(acc(c)), get(y)), get(x)),
    );
  const ints = kind !== "f32";
  const splat = (v: number) => ints ? m.i32x4.splat(m.i32.const(v)) : m.f32x4.splat(m.f32.const(v));
  const chains = [...Array(CHAINS).keys()];
  const body = m.block(null, [
    ...chains.map((c) => m.local.set(acc(c), splat(0))),
    m.local.set(x, splat(ints ? 3 : 1e-4)),
    // The relaxed dot's second operand in 7 bits (0x05 in each byte): defined on every engine.
    m.local.set(y, splat(kind === "i8" ? 0x05050505 : ints ? 5 : 0.9999)),
    m.loop(
      "top",
      m.block(null, [
        ...chains.map(step),
        m.local.set(0, m.i32.sub(m.local.get(0, i32), m.i32.const(1))),
        m.br("top", m.local.get(0, i32)),
      ]),
    ),
    // A lane of the chains' sum, so that none is dead code (JS takes no v128).
    m.i32x4.extract_lane(
      chains.slice(1).reduce(
        (s, c) => (ints ? m.i32x4.add(s, get(acc(c))) : m.f32x4.add(s, get(acc(c)))),
        get(acc(0)),
      ),
      0,
    ),
  ], i32);
  const vars = [...chains.map(() => v128), v128, v128];
  m.addFunction("run", i32, i32, vars, body);
  m.addFunctionExport("run", "run");
  return m.emitBinary();
}

/**
 * A worker that compiles the module it is sent (eagerly optimized: `WebAssembly.compile`), runs
 * it once to warm up and says so; told to go, it runs it timed and posts the ms.
 */
const WORKER = `
let run, iters;
self.onmessage = async (e) => {
  if (e.data === "go") {
    const t = performance.now();
    run(iters);
    self.postMessage(performance.now() - t);
    return;
  }
  iters = e.data.iters;
  run = (await WebAssembly.instantiate(await WebAssembly.compile(e.data.bytes))).exports.run;
  run(iters >> 4);
  self.postMessage("ready");
};`;

/** GFLOP/s of `kind`'s peak kernel on `threads` workers at once: per thread (median) and in all. */
async function peak(kind: Kind, threads: number): Promise<[number, number]> {
  const bytes = peakModule(kind);
  const url = URL.createObjectURL(new Blob([WORKER], { type: "application/javascript" }));
  const workers = [...Array(threads)].map(() => new Worker(url, { type: "module" }));
  const next = (w: Worker) =>
    new Promise<unknown>((resolve) => w.onmessage = (e) => resolve(e.data));
  try {
    const ready = workers.map(next);
    workers.forEach((w) => w.postMessage({ bytes, iters: ITERS }));
    await Promise.all(ready);
    // All compiled and warm: the timed runs start together.
    const done = workers.map(next);
    workers.forEach((w) => w.postMessage("go"));
    const ms = await Promise.all(done) as number[];
    // Lanes (4 f32, or 8 i16 pairs' products) times 2 ops a multiply-add.
    const flop = ITERS * CHAINS * (kind === "i8" ? 32 : kind === "i16" ? 16 : 8);
    return [flop / median(ms) / 1e6, (threads * flop) / Math.max(...ms) / 1e6];
  } finally {
    workers.forEach((w) => w.terminate());
    URL.revokeObjectURL(url);
  }
}

/** A product of BERT-base or GPT-2 small: `[batch ×] M × K` by `K × N`. */
interface Product {
  readonly name: string;
  readonly batch: number;
  readonly m: number;
  readonly k: number;
  readonly n: number;
}

const PRODUCTS: readonly Product[] = [
  { name: "Q, K, V joined (768 → 2304)", batch: 1, m: 128, k: 768, n: 2304 },
  { name: "attention out (768 → 768)", batch: 1, m: 128, k: 768, n: 768 },
  { name: "MLP up (768 → 3072)", batch: 1, m: 128, k: 768, n: 3072 },
  { name: "MLP down (3072 → 768)", batch: 1, m: 128, k: 3072, n: 768 },
  { name: "scores, 12 heads (Q·Kᵀ)", batch: 12, m: 128, k: 64, n: 128 },
  { name: "context, 12 heads (P·V)", batch: 12, m: 128, k: 128, n: 64 },
  { name: "GPT-2 logits (768 → 50257)", batch: 1, m: 128, k: 768, n: 50257 },
];

/**
 * Median ms of kiln's run of `p` on wasm with `threads` threads: in f32, or (`int8`) as ONNX
 * Runtime's dynamic quantization writes it, MatMulInteger of a u8 A (its zero point 128) by
 * constant i8 weights.
 */
async function productMs(p: Product, threads: number, int8 = false): Promise<number> {
  const b = new GraphBuilder();
  const lead = p.batch > 1 ? [p.batch] : [];
  const [aShape, wShape] = [[...lead, p.m, p.k], [...lead, p.k, p.n]];
  const count = (shape: number[]) => shape.reduce((x, y) => x * y, 1);
  const x = b.input("x", aShape, int8 ? "u8" : "f32");
  const w = int8
    ? b.constant(
      Int8Array.from({ length: count(wShape) }, (_, i) => (i * 7919) % 255 - 127),
      wShape,
      "i8",
    )
    : b.constant(
      Float32Array.from({ length: count(wShape) }, (_, i) => ((i * 7919) % 97) / 97),
      wShape,
    );
  b.output(
    "y",
    int8
      ? b.op("MatMulInteger", [x, w, b.constant(128, [], "u8")], { a_zero: 1 })
      : b.op("MatMul", [x, w]),
  );
  const backend = new WasmBackend({ threads });
  using exe = await compile(b.build(), { backend, cache: false });
  const n = count(aShape);
  const data = int8
    ? Uint8Array.from({ length: n }, (_, i) => (i * 31) % 256)
    : Float32Array.from({ length: n }, (_, i) => (i % 13) / 13);
  const inputs = { x: { data, shape: aShape, dtype: int8 ? "u8" as const : "f32" as const } };
  for (let i = 0, t = performance.now(); i < 5 || performance.now() - t < 300; i++) {
    await exe.run(inputs);
  }
  return median(await wallTimes(() => exe.run(inputs), runs));
}

const threads = Number(arg("--threads") ?? navigator.hardwareConcurrency);
const [f32One] = await peak("f32", 1);
const [, f32All] = await peak("f32", threads);
const [i16One] = await peak("i16", 1);
const [, i16All] = await peak("i16", threads);
// Relaxed SIMD's int8 dot product: where the engine maps it to one instruction (x86's VNNI), twice
// the i16 dot's multiply-adds an instruction.
const [i8One] = hasRelaxedSimd() ? await peak("i8", 1) : [0];
const [, i8All] = hasRelaxedSimd() ? await peak("i8", threads) : [0, 0];
const rows = [];
for (const p of Deno.args.includes("--peak-only") ? [] : PRODUCTS) {
  const gflop = (2 * p.batch * p.m * p.k * p.n) / 1e9;
  for (const int8 of p.batch === 1 && p.n <= 3072 ? [false, true] : [false]) {
    const [onePeak, allPeak] = int8 ? [i16One, i16All] : [f32One, f32All];
    const one = await productMs(p, 1, int8), all = await productMs(p, threads, int8);
    rows.push({
      product: int8 ? `${p.name}, int8` : p.name,
      gflop,
      oneThreadMs: one,
      oneThreadGflops: gflop / one * 1e3,
      oneThreadShare: gflop / one * 1e3 / onePeak,
      threads,
      allMs: all,
      allGflops: gflop / all * 1e3,
      allShare: gflop / all * 1e3 / allPeak,
    });
  }
}
const result = {
  cores: navigator.hardwareConcurrency,
  relaxedSimd: hasRelaxedSimd(),
  peak: {
    f32OneThread: f32One,
    f32AllThreads: f32All,
    i16OneThread: i16One,
    i16AllThreads: i16All,
    i8OneThread: i8One,
    i8AllThreads: i8All,
  },
  products: rows,
};
if (json) console.log(JSON.stringify(result));
else {
  const f = (v: number, d = 1) => v.toFixed(d);
  console.log(
    `peak (GFLOP/s): f32 ${f(f32One)} a thread, ${f(f32All)} on ${threads}; ` +
      `i16 dot ${f(i16One)} a thread, ${f(i16All)} on ${threads}; ` +
      `i8 relaxed dot ${f(i8One)} a thread, ${f(i8All)} on ${threads}` +
      (result.relaxedSimd ? " (relaxed SIMD)" : ""),
  );
  for (const r of rows) {
    console.log(
      `${r.product.padEnd(30)} 1 thread ${f(r.oneThreadMs, 2).padStart(8)} ms ${
        f(r.oneThreadGflops).padStart(6)
      } GFLOP/s (${f(100 * r.oneThreadShare, 0)} %), ${threads} threads ${
        f(r.allMs, 2).padStart(8)
      } ms ${f(r.allGflops).padStart(6)} GFLOP/s (${f(100 * r.allShare, 0)} %)`,
    );
  }
}

/**
 * What a WebAssembly SIMD f32 product's inner loop reaches on one core once its operands come
 * from memory: hand-written register tiles over operands that stay in L1, beside the same tile
 * fed from registers. `bench/wasm_peak.ts` sets the multiply-add peak with chains that read
 * nothing; a product must load its operands, and on some hosts the loads, not the multiply-adds,
 * set its limit (the 2-core AMD EPYC VM of 2026-12-02: every tile below about 55 % of that peak).
 *
 *   deno run -A --config deno.json bench/wasm_tiles.ts [--k 256] [--rounds 4] [--json]
 *
 * Forms, each a k loop of two steps a pass over `k` (A's rows k floats apart, B's panel after):
 * - `broadcast R×4V`: kiln's tiled form (`shaders/wasm/matmul.ts`, 6 × 8): each step loads V
 *   vectors of B and broadcasts each of R rows' A value (`v128.load32_splat`) into R·V
 *   accumulators.
 * - `dot R×C`: vectors along k, no broadcast: R rows of A by C rows of Bᵀ, four k a load.
 * - `registers 6×8`: the broadcast tile with A's value taken from a register (B still loaded):
 *   the multiply-adds' own limit with the tile's other work.
 * GFLOP/s count two a multiply-add; each form's median over the rounds, after warm calls that let
 * V8 tier the function up (a running call never switches tiers).
 *
 * @module
 */
import { wasm } from "../shaders/wasm/encoder.ts";
import { median } from "./timed.ts";

const arg = (name: string, fallback: number) => {
  const at = Deno.args.indexOf(name);
  return at >= 0 ? Number(Deno.args[at + 1]) : fallback;
};
const K = arg("--k", 256), ROUNDS = arg("--rounds", 4);
/** Multiply-adds a timed call performs, about (rounded to whole passes). */
const WORK = 2 ** 31;

/** A tile: `rows` of A, `width` vectors of B (broadcast form) or rows of Bᵀ (dot form). */
interface Tile {
  readonly name: string;
  readonly form: "broadcast" | "dot" | "registers";
  readonly rows: number;
  readonly width: number;
}

const TILES: readonly Tile[] = [
  { name: "broadcast 6×8 (kiln's)", form: "broadcast", rows: 6, width: 2 },
  { name: "broadcast 4×12", form: "broadcast", rows: 4, width: 3 },
  { name: "broadcast 3×16", form: "broadcast", rows: 3, width: 4 },
  { name: "dot 4×2", form: "dot", rows: 4, width: 2 },
  { name: "dot 3×4", form: "dot", rows: 3, width: 4 },
  { name: "registers 6×8", form: "registers", rows: 6, width: 2 },
];

/**
 * Multiply-adds of one pass over k (a call's `reps` passes): a sum a lane, four lanes a vector;
 * the dot form's vectors hold four k, so each of its sums takes k / 4 of them.
 */
const perPass = (t: Tile) => (t.form === "dot" ? 1 : 4) * K * t.rows * t.width;

/** The module of `t`: `run(reps)` passes over k, returning a lane of the sums (none is dead). */
function tileModule(t: Tile): Uint8Array {
  const m = new wasm.Module();
  const { v128, i32 } = wasm;
  m.setMemory(4, 4);
  const { rows: R, width: V } = t;
  const n = R * V;
  // Locals: 0 reps, 1 pointer, 2 k counter, then the sums, A's values, B's vectors.
  const P = 1, KK = 2, SUM = (i: number) => 3 + i, A = (i: number) => 3 + n + i;
  const B = (j: number) => 3 + n + R + j;
  const get = (l: number, type: typeof i32 | typeof v128 = i32) => m.local.get(l, type);
  const madd = (a: number, b: number, s: number) =>
    m.local.set(s, m.f32x4.relaxed_madd(get(a, v128), get(b, v128), get(s, v128)));
  const row = 4 * K, panel = R * row;
  const steps: number[] = [];
  if (t.form === "dot") {
    // Four k a step: each row of A and of Bᵀ one vector; the sums run along k.
    for (let i = 0; i < R; i++) steps.push(m.local.set(A(i), m.v128.load(row * i, 4, get(P))));
    for (let j = 0; j < V; j++) {
      steps.push(m.local.set(B(j), m.v128.load(panel + row * j, 4, get(P))));
    }
    for (let i = 0; i < R; i++) {
      for (let j = 0; j < V; j++) steps.push(madd(A(i), B(j), SUM(V * i + j)));
    }
    steps.push(m.local.set(P, m.i32.add(get(P), m.i32.const(16))));
  } else {
    for (let u = 0; u < 2; u++) {
      for (let j = 0; j < V; j++) {
        steps.push(m.local.set(B(j), m.v128.load(panel + 16 * (V * u + j), 4, get(P))));
      }
      for (let i = 0; i < R; i++) {
        if (t.form === "broadcast") {
          steps.push(m.local.set(A(0), m.v128.load32_splat(row * i + 4 * u, 4, get(P))));
        }
        for (let j = 0; j < V; j++) steps.push(madd(A(0), B(j), SUM(V * i + j)));
      }
    }
    steps.push(m.local.set(P, m.i32.add(get(P), m.i32.const(8))));
  }
  steps.push(m.local.set(KK, m.i32.sub(get(KK), m.i32.const(1))), m.br("k", get(KK)));
  const pass = m.block(null, [
    m.local.set(P, m.i32.const(0)),
    m.local.set(KK, m.i32.const(t.form === "dot" ? K / 4 : K / 2)),
    m.loop("k", m.block(null, steps)),
    m.local.set(0, m.i32.sub(get(0), m.i32.const(1))),
    m.br("reps", get(0)),
  ]);
  const sums = [...Array(n).keys()];
  const body = m.block(null, [
    ...sums.map((i) => m.local.set(SUM(i), m.f32x4.splat(m.f32.const(0)))),
    ...(t.form === "registers" ? [m.local.set(A(0), m.f32x4.splat(m.f32.const(0.5)))] : []),
    m.loop("reps", pass),
    m.i32x4.extract_lane(
      sums.slice(1).reduce((s, i) => m.f32x4.add(s, get(SUM(i), v128)), get(SUM(0), v128)),
      0,
    ),
  ], i32);
  m.addFunction("run", i32, i32, [i32, i32, ...Array(n + R + V).fill(v128)], body);
  m.addFunctionExport("run", "run");
  return m.emitBinary();
}

/** GFLOP/s of one timed call of `run` over `reps` passes of `t`. */
function timed(t: Tile, run: (reps: number) => number, reps: number): number {
  const start = performance.now();
  run(reps);
  return (2 * perPass(t) * reps) / (performance.now() - start) / 1e6;
}

if (4 * K * 12 > 4 * 65536) throw new Error("--k too large for the tiles' memory");
const runs = await Promise.all(TILES.map(async (t) => {
  const { instance } = await WebAssembly.instantiate(tileModule(t) as Uint8Array<ArrayBuffer>);
  const run = instance.exports.run as (reps: number) => number;
  const reps = Math.max(1, Math.round(WORK / perPass(t)));
  for (let i = 0; i < 4; i++) run(reps >> 4);
  return { t, run, reps };
}));
const rates = new Map<string, number[]>(TILES.map((t) => [t.name, []]));
for (let r = 0; r < ROUNDS; r++) {
  for (const { t, run, reps } of runs) rates.get(t.name)!.push(timed(t, run, reps));
}
const rows = TILES.map((t) => ({ tile: t.name, gflops: median(rates.get(t.name)!) }));
if (Deno.args.includes("--json")) console.log(JSON.stringify({ k: K, rows }));
else for (const r of rows) console.log(`${r.tile.padEnd(24)} ${r.gflops.toFixed(1)} GFLOP/s`);

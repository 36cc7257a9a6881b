/**
 * The inner loops of wasm's two f32 product tiles as modules of their own, for the backend to
 * time on the host it runs on (`backends/wasm/tile_probe.ts`): the broadcast tile
 * (`matmul.ts`'s 6 × 8, each row's A value splatted) and the dot tile (`gemm_dot.ts`'s 6 × 2,
 * four k a load of both operands). Which is faster is the host's: on the H100 machines' Intel
 * host the broadcast tile ran at 46 % of the multiply-add peak and a dot tile 18 % faster; on the
 * 2-core AMD VM the broadcast tile reached the peak in some processes, where the dot tiles ran
 * 4-7 % behind on the shared models (`bench/REPORT-models.md`, sessions 94-95).
 *
 * Both hold twelve sums over operands that stay in L1: `run(reps)` takes `reps` passes over
 * `PROBE_K` and returns a lane of the sums (so that none is dead).
 *
 * @module
 */
import { type Wasm, wasm as defaultWasm } from "./encoder.ts";

/** The two forms of wasm's f32 product tiles. */
export type TileForm = "broadcast" | "dot";

/** K of a probe's pass. */
export const PROBE_K = 256;

/** Vector multiply-adds of one pass of `form`'s probe. */
export function probeMadds(form: TileForm): number {
  return form === "broadcast" ? 12 * PROBE_K : 3 * PROBE_K;
}

/** The probe module of `form`, its multiply-adds fused where `fma` (as the kernels' are). */
export function tileProbe(form: TileForm, fma: boolean, wasm: Wasm = defaultWasm): Uint8Array {
  const m = new wasm.Module();
  const { v128, i32 } = wasm;
  m.setMemory(1, 1);
  // Locals: 0 reps, 1 A's pointer, 2 k counter, 3-14 the sums, 15-16 B's vectors, 17 A's, 18
  // B's pointer.
  const P = 1, KK = 2, SUM = (i: number) => 3 + i, B = (j: number) => 15 + j, A = 17, Q = 18;
  const get = (l: number, type: typeof i32 | typeof v128 = i32) => m.local.get(l, type);
  const madd = (a: number, b: number, s: number) =>
    m.local.set(
      s,
      fma
        ? m.f32x4.relaxed_madd(get(a, v128), get(b, v128), get(s, v128))
        : m.f32x4.add(get(s, v128), m.f32x4.mul(get(a, v128), get(b, v128))),
    );
  // A's six rows, then B (eight columns k-major, or two columns by K).
  const row = 4 * PROBE_K, panel = 6 * row;
  const steps: number[] = [];
  for (let j = 0; j < 2; j++) {
    const at = form === "broadcast" ? 16 * j : row * j;
    steps.push(m.local.set(B(j), m.v128.load(at, 4, get(Q))));
  }
  for (let i = 0; i < 6; i++) {
    steps.push(
      m.local.set(
        A,
        form === "broadcast"
          ? m.v128.load32_splat(row * i, 4, get(P))
          : m.v128.load(row * i, 4, get(P)),
      ),
    );
    for (let j = 0; j < 2; j++) steps.push(madd(A, B(j), SUM(2 * i + j)));
  }
  // The broadcast tile steps one k (B's panel 32 bytes on, A 4); the dot tile four (16 bytes).
  steps.push(
    m.local.set(P, m.i32.add(get(P), m.i32.const(form === "broadcast" ? 4 : 16))),
    m.local.set(Q, m.i32.add(get(Q), m.i32.const(form === "broadcast" ? 32 : 16))),
    m.local.set(KK, m.i32.sub(get(KK), m.i32.const(1))),
    m.br("k", get(KK)),
  );
  const pass = m.block(null, [
    m.local.set(P, m.i32.const(0)),
    m.local.set(Q, m.i32.const(panel)),
    m.local.set(KK, m.i32.const(form === "broadcast" ? PROBE_K : PROBE_K / 4)),
    m.loop("k", m.block(null, steps)),
    m.local.set(0, m.i32.sub(get(0), m.i32.const(1))),
    m.br("reps", get(0)),
  ]);
  const sums = [...Array(12).keys()];
  const body = m.block(null, [
    ...sums.map((i) => m.local.set(SUM(i), m.f32x4.splat(m.f32.const(0)))),
    m.loop("reps", pass),
    m.i32x4.extract_lane(
      sums.slice(1).reduce((s, i) => m.f32x4.add(s, get(SUM(i), v128)), get(SUM(0), v128)),
      0,
    ),
  ], i32);
  m.addFunction("run", i32, i32, [i32, i32, ...Array(15).fill(v128), i32], body);
  m.addFunctionExport("run", "run");
  return m.emitBinary();
}

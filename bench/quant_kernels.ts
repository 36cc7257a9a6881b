/**
 * A dynamically quantized product as ONNX Runtime's `quantize_dynamic` writes BERT's Linear layers
 * (`bench/gpu_kernels.ts`'s `linear-…-int8` rows): f32 A through `DynamicQuantizeLinear`, a
 * `MatMulInteger` by constant i8 weights with A's zero point, the i32 sums cast to f32 and scaled
 * by both scales. The expectation quantizes A as ONNX specifies (f32 scale, rounding half to even)
 * and sums in float64.
 *
 * @module
 */
import { GraphBuilder } from "../jit/frontend/graph_builder.ts";
import { uniform } from "../jit/support/random.ts";
import type { Kernel } from "./decode_kernels.ts";

/** The weights' scale (per tensor, as `quantize_dynamic` writes for MatMulInteger). */
const W_SCALE = 0.004;

/** Rounds half to even, as ONNX's quantizers do. */
function roundEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** A [m, k] f32 A quantized to u8 (ONNX's DynamicQuantizeLinear): the values and the zero point. */
function quantized(a: Float32Array): { q: Uint8Array; zero: number; scale: number } {
  let lo = 0, hi = 0;
  for (const v of a) lo = Math.min(lo, v), hi = Math.max(hi, v);
  const scale = Math.fround((hi - lo) / 255);
  const clamp = (v: number) => Math.min(255, Math.max(0, v));
  const zero = clamp(roundEven(-lo / scale));
  const q = Uint8Array.from(a, (v) => clamp(roundEven(Math.fround(v / scale)) + zero));
  return { q, zero, scale };
}

/** The m×k by k×n product of a quantized Linear layer (see the module's description). */
export function linearInt8(m: number, k: number, n: number): Kernel {
  const g = new GraphBuilder();
  const a = uniform(m * k, 5);
  const w = Int8Array.from(uniform(k * n, 6), (v) => Math.round(v * 127));
  const [q, scale, zero] = g.opN("DynamicQuantizeLinear", [g.input("a", [m, k])], undefined, 3);
  const sums = g.op("MatMulInteger", [q, g.constant(w, [k, n], "i8"), zero], {
    a_zero: 1,
    b_zero: 0,
  });
  const scales = g.op("Mul", [scale, g.constant(W_SCALE)]);
  g.output("y", g.op("Mul", [g.op("Cast", [sums], { to: "f32" }), scales]));
  const A = quantized(a);
  return {
    id: `linear-${m}x${k}x${n}-int8`,
    graph: g.build(),
    inputs: { a: { data: a, shape: [m, k] } },
    expect: (i) => {
      const r = Math.floor(i / n), c = i % n;
      let s = 0;
      for (let j = 0; j < k; j++) s += (A.q[r * k + j] - A.zero) * w[j * n + c];
      return s * Math.fround(A.scale * W_SCALE);
    },
    size: m * n,
    flops: 2 * m * n * k,
    half: false,
  };
}

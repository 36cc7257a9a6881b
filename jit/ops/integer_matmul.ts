/**
 * `IntegerMatMul`: the exact i32 product of two integer tensors (i16 or narrower), MatMul's
 * shapes, whose elementwise products are at most the attribute `bound` in magnitude (the
 * importer's quantized products: zero-point-shifted 8-bit values, 255² = 65025). Sums wrap at
 * 2^32 as ONNX Runtime's int32 accumulation does. `parts`, where given, is how many chunks of K
 * sum exactly in f32; else, where `max_a` bounds |a| and b is a constant, the decomposition works
 * it out from the weights' actual magnitudes (`fewestParts`), only where a backend needs the
 * chunks.
 *
 * A backend whose code generator has integer dot products (WebAssembly's `i32x4.dot_i16x8_s`)
 * runs it as one integer matmul kernel (fusion asks {@linkcode nativeIntegerMatMul}); elsewhere it
 * decomposes into the float products every backend tiles: each product of two integers below
 * 2^12 is exact in f32, and so is every partial sum while it stays under 2^24 whatever the order,
 * so K is split into chunks that stay under it (a batch of float products, summed in i32).
 *
 * @module
 */
import { matmulShape } from "./nn.ts";
import {
  type Attrs,
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
  ownedTensor,
  type ValueType,
} from "./registry.ts";

/** Sums of integers below this stay exact in f32, whatever the order they are added in. */
const EXACT_SUM = 2 ** 24;

/**
 * How many integers of magnitude at most `bound` one f32 sum adds exactly, in any order (0: not
 * even one): 258 products of two shifted 8-bit values (255² each).
 */
export function exactTerms(bound: number): number {
  return Math.floor((EXACT_SUM - 1) / bound);
}

/**
 * The fewest chunks of a contraction of length `len` (below `most`, else `most`) whose sums stay
 * exact in f32 for every output `j` of `outputs`: with constant weights `weights` ([len,
 * outputs], their magnitudes counted) and the other operand at most `maxA`, each chunk's sum is
 * at most `maxA` times the chunk's weights. Quantized weights are mostly far below their type's
 * bound: BERT-base's K = 768 then sums in one float product, where the bound alone asks for three.
 */
export function fewestParts(
  len: number,
  outputs: number,
  weights: ArrayLike<number>,
  maxA: number,
  most: number,
): number {
  // A chunk's |w| (integers) summed may reach this: times max|a|, it stays under 2^24.
  const limit = exactTerms(maxA);
  // Each trial sums its chunks' rows into one row of sums: a table of prefix sums over all of K
  // (fresh pages: 0.7 GB for BERT-base) took a second of its int8 import.
  const sums = new Float64Array(outputs);
  const fits = (size: number) => {
    for (let s = 0; s < len; s += size) {
      sums.fill(0);
      for (let k = s, at = s * outputs; k < Math.min(len, s + size); k++) {
        for (let j = 0; j < outputs; j++, at++) sums[j] += Math.abs(weights[at]);
      }
      for (let j = 0; j < outputs; j++) if (sums[j] > limit) return false;
    }
    return true;
  };
  for (let parts = 1; parts < most; parts++) if (fits(Math.ceil(len / parts))) return parts;
  return most;
}

/** The integer types IntegerMatMul and IntegerConv take. */
export const NARROW = ["i16", "i8", "u8"] as const;

/** The largest product an i16 × i16 MatMul can meet: its default `bound`. */
export const I16_BOUND = 2 ** 30;

/**
 * Checks an integer product's attribute `name`, a bound on magnitudes (`what` they bound) in
 * [1, 2^30]; absent, the bound of i16 products.
 */
export function boundAttr(ctx: InferContext, name: string, what: string): void {
  const bound = ctx.int(name, I16_BOUND);
  if (!(bound >= 1 && bound <= I16_BOUND)) {
    ctx.fail(`${name} ${bound} is outside [1, 2^30]`, `give ${what}`, "bad-attribute");
  }
}

/**
 * Whether a product's operands are bytes the integer tiles take four at a time: one u8 and one
 * i8 (relaxed SIMD's byte dot product multiplies signed bytes by unsigned ones), K a multiple of
 * 4. Fusion meets them where `byte_products.ts` rewrote the importer's shifted products.
 */
export function byteOperands(a: ValueType, b: ValueType, k: number): boolean {
  const types = [a.dtype, b.dtype].sort().join();
  return types === "i8,u8" && k % 4 === 0;
}

/**
 * Whether integer tiles with `dots` take operands `a` and `b` over a K of `k`: i16 pairs (K even)
 * where the backends have dots of every kind, bytes (see {@linkcode byteOperands}) where they have
 * at least byte dots (WGSL's `dot4I8Packed` only those).
 */
export function tiledOperands(
  a: ValueType,
  b: ValueType,
  k: number,
  dots: true | "bytes",
): boolean {
  const pairs = dots === true && a.dtype === "i16" && b.dtype === "i16" && k % 2 === 0;
  return pairs || byteOperands(a, b, k);
}

/**
 * Whether fusion should build an IntegerMatMul of operands `a` and `b` as one integer matmul
 * kernel (where the backends have integer `dots`): operands of rank 2 or more that the integer
 * tiles take (see {@linkcode tiledOperands}).
 */
export function nativeIntegerMatMul(
  a: ValueType,
  b: ValueType,
  dots: true | "bytes" = true,
): boolean {
  if (a.shape.length < 2 || b.shape.length < 2) return false;
  return tiledOperands(a, b, a.shape.at(-1)!, dots);
}

/**
 * A constant 2-D weight `b` [K, N] as the f32 B its float products read, `rows` of them (zero
 * rows padding K) as `parts` chunks ([parts, rows / parts, N]; 0 parts: [K, N]), computed once
 * here; `undefined` where b is not a constant of the graph. Cast in the graph, the weight was
 * converted again in every run (BERT-base int8 on the H200: 72 kernels, 0.69 of 5.5 ms).
 */
function floatWeight(e: Emitter, b: EmitRef, [rows, parts]: [number, number]): EmitRef | undefined {
  const shape = e.typeOf(b).shape, known = shape.length === 2 ? e.constantOf(b) : undefined;
  if (!known) return undefined;
  const values = new Float32Array(rows * shape[1]);
  values.set(known);
  const out = parts ? [parts, rows / parts, shape[1]] : [...shape];
  return ownedTensor(e, values, out, "f32");
}

/**
 * Chunks of K a product of `b` sums exactly in: `attrs.parts` where given, else as few as a
 * constant 2-D b's magnitudes allow with |a| at most `attrs.max_a`, else as the bound asks
 * (`most`). Worked out here, not at import: a backend with integer dots never asks (0.3 s of
 * BERT-base int8's compile on the 2-core VM).
 */
function chunksOf(e: Emitter, b: EmitRef, attrs: Attrs, most: number): number {
  if (attrs.parts !== undefined) return attrs.parts as number;
  const shape = e.typeOf(b).shape, maxA = attrs.max_a as number | undefined;
  const weights = maxA !== undefined && shape.length === 2 ? e.constantOf(b) : undefined;
  return weights ? fewestParts(shape[0], shape[1], weights, maxA!, most) : most;
}

/** The decomposition: float products exact by chunks of K, summed in i32. */
function decompose(e: Emitter, a: EmitRef, b: EmitRef, attrs: Attrs): EmitRef {
  const f = (x: EmitRef) => e.op("Cast", [x], { to: "f32" });
  const i32 = (x: EmitRef) => e.op("Cast", [x], { to: "i32" });
  const [as, bs] = [e.typeOf(a).shape, e.typeOf(b).shape];
  const k = as.at(-1)!, chunk = exactTerms((attrs.bound as number) ?? I16_BOUND);
  const parts = chunksOf(e, b, attrs, Math.ceil(k / Math.max(1, chunk)));
  if (parts <= 1) return i32(e.op("MatMul", [f(a), floatWeight(e, b, [k, 0]) ?? f(b)]));
  if (chunk < 1 || as.length < 2 || bs.length < 2) return e.op("MatMul", [i32(a), i32(b)]);
  // Chunks as even as they come (K = 768 in three of 256: no padding).
  const size = Math.ceil(k / parts), pad = parts * size - k;
  const known = floatWeight(e, b, [parts * size, parts]);
  const padded = (x: EmitRef, axis: number) =>
    pad ? e.op("Pad", [x], { pads: [0, pad], axes: [axis], mode: "constant", value: 0 }) : x;
  const ra = as.length, rb = bs.length;
  // A: [..., M, K] → [..., parts, M, size]; B: [..., K, N] → [..., parts, size, N].
  const a3 = e.op("Reshape", [padded(f(a), ra - 1)], { shape: [...as.slice(0, -1), parts, size] });
  const perm = [...Array(ra - 2).keys(), ra - 1, ra - 2, ra];
  const aParts = e.op("Transpose", [a3], { perm });
  const bParts = known ?? e.op("Reshape", [padded(f(b), rb - 2)], {
    shape: [...bs.slice(0, -2), parts, size, bs.at(-1)!],
  });
  const sums = i32(e.op("MatMul", [aParts, bParts]));
  // The parts axis sits before M and N in the product of rank max(ra, rb) + 1.
  return e.op("ReduceSum", [sums], { axes: [Math.max(ra, rb) - 2], keepdims: 0 });
}

const integerOps: OpDef[] = [{
  name: "IntegerMatMul",
  category: "matmul",
  arity: [2, 2],
  primitive: false,
  infer: (ctx) => {
    ctx.requireDType(0, NARROW);
    ctx.requireDType(1, NARROW);
    const parts = ctx.int("parts", 1);
    if (!(parts >= 1)) {
      ctx.fail(`parts ${parts} is below 1`, "give 1 or more chunks", "bad-attribute");
    }
    boundAttr(ctx, "bound", "the largest |a·b| product");
    boundAttr(ctx, "max_a", "the largest |a|");
    return [{ shape: matmulShape(ctx, ctx.input(0).shape, ctx.input(1).shape), dtype: "i32" }];
  },
  decompose: (e, [a, b], attrs) => [decompose(e, a, b, attrs)],
}];

defineOps(integerOps);

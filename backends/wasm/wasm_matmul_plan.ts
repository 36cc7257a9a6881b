/**
 * Matmul planning for the WebAssembly generator: whether a kernel contracts, the shape of the
 * product, whether A is packed (and its gather table for convolutions), and the scratch and
 * prepacked bytes the arena must hold. The emitters are `wasm_matmul.ts`.
 *
 * @module
 */
import { affineOffset } from "../../jit/access.ts";
import {
  applyStep,
  type Expr,
  type IndexStep,
  type KernelIR,
  linearIndex,
  matmulOperands,
  rowCount,
} from "../../jit/kernel_ir.ts";
/** Rows of a matmul tile (each two f32x4 accumulators wide). */
export const TILE_ROWS = 6;

/** Bytes of one output tile in a matmul's scratch; packed rows of A follow it. */
export const TILE_BYTES = 32 * TILE_ROWS;

/** Whether `kernel` runs through the matmul paths (a matmul, or a convolution as implicit GEMM). */
export function contracts(kernel: KernelIR): boolean {
  // An empty contraction (K = 0) takes the generic reduction, which sums nothing to 0.
  if (kernel.pattern === "matmul" && kernel.space.at(-1) === 0) return false;
  return kernel.pattern === "matmul" || matmulOperands(kernel) !== undefined;
}

/** Most scratch bytes spent on a packed copy of A (and as much on its indirection table). */
const PACK_LIMIT = 1 << 22;

/** Bytes of B's panels: 8 columns each (the last zero-padded), k-major. */
export const panelsBytes = (n: number, k: number) => Math.ceil(n / 8) * 32 * k;

/** Rows of A: the product's rows over every batch. */
const rowsOfA = (kernel: KernelIR, n: number) => rowCount(kernel) / n;

/**
 * Whether the tiled path packs A: its load is not affine (a convolution's patches, or a reshape
 * that splits an index, as attention's head merge does), so its rows are gathered once into
 * the scratch and read contiguously, instead of evaluating the index map for every
 * multiply-add.
 */
export function packsA(kernel: KernelIR): boolean {
  const operands = matmulOperands(kernel);
  if (!operands) return false;
  const { a, n, k } = operands;
  return affineOffset(a.steps, kernel.space, kernel.inputs[a.input].shape) === undefined &&
    rowsOfA(kernel, n) * k * 4 <= PACK_LIMIT;
}

/**
 * The indirection table of a packed A (as XNNPACK's indirect convolution): the element offset
 * A's index map reaches for every row and k, or -1 where it reads the fill. Computed once at
 * code generation, it turns the gather into a table walk. `undefined` when A is not packed or
 * its out-of-bounds reads have different fills.
 */
export function indirection(kernel: KernelIR): { table: Int32Array; fill: number } | undefined {
  if (!packsA(kernel)) return undefined;
  const { nb, n, k, a } = matmulOperands(kernel)!;
  const space = kernel.space;
  const rows = rowsOfA(kernel, n), table = new Int32Array(rows * k);
  const rowAxes = space.slice(0, nb + 1);
  const offsetAt = stepChain(a.steps, space.length, kernel.inputs[a.input].shape);
  let fill: number | undefined;
  const coords = space.map(() => 0);
  for (let r = 0; r < rows; r++) {
    for (let d = nb, rest = r; d >= 0; d--) {
      coords[d] = rest % rowAxes[d];
      rest = Math.floor(rest / rowAxes[d]);
    }
    for (let p = 0; p < k; p++) {
      coords[nb + 2] = p;
      const at = offsetAt(coords);
      if (at < 0) {
        const step = a.steps[-at - 1];
        const f = step.kind === "affine" ? step.fill ?? 0 : 0;
        if (fill !== undefined && !Object.is(fill, f)) return undefined;
        fill = f;
      }
      table[r * k + p] = at < 0 ? -1 : at;
    }
  }
  return { table, fill: fill ?? 0 };
}

/**
 * `applyStep` over a chain of steps followed by `linearIndex` into `shape`, for coordinates of
 * rank `rank`, without allocating: the element offset, or `-(i + 1)` when step `i` reads out of
 * bounds. shufflenet's 37 tables hold 1.6M entries (its first conv's 0.68M); allocating arrays
 * per step and entry took 0.94 s of its 1.5 s of code generation on 2 cores, this 0.39 s.
 */
function stepChain(
  steps: readonly IndexStep[],
  rank: number,
  shape: readonly number[],
): (coords: readonly number[]) => number {
  const ranks = [rank];
  for (const s of steps) {
    const r = ranks[ranks.length - 1];
    ranks.push(
      s.kind === "affine" ? s.coeff.length : s.kind === "reshape" ? s.to.length : r - s.drop + 1,
    );
  }
  const buffers = ranks.map((r) => new Float64Array(r));
  // An affine step's rows hold a few nonzero coefficients among many zeros: only those are kept.
  const terms = steps.map((s) =>
    s.kind === "affine" ? s.coeff.map((row) => row.flatMap((c, d) => (c ? [d, c] : []))) : []
  );
  const strides = shape.map((_, i) => shape.slice(i + 1).reduce((p, d) => p * d, 1));
  return (coords) => {
    let x: ArrayLike<number> = coords;
    for (let i = 0; i < steps.length; i++) {
      const step = steps[i], out = buffers[i + 1];
      if (step.kind === "gather") {
        // No data to read the index from at code generation: applyStep says so.
        applyStep(step, Array.from(x));
      } else if (step.kind === "reshape") {
        let rest = 0;
        for (let d = 0; d < x.length; d++) rest = rest * step.from[d] + x[d];
        for (let d = step.to.length - 1; d >= 0; d--) {
          out[d] = rest % step.to[d];
          rest = Math.floor(rest / step.to[d]);
        }
      } else {
        const rows = terms[i], bounds = step.bounds;
        for (let j = 0; j < out.length; j++) {
          let v = step.offset[j];
          const row = rows[j];
          for (let t = 0; t < row.length; t += 2) v += row[t + 1] * x[row[t]];
          if (bounds && (v < 0 || v >= bounds[j])) return -(i + 1);
          out[j] = v;
        }
      }
      x = out;
    }
    let at = 0;
    for (let d = 0; d < strides.length; d++) at += x[d] * strides[d];
    return at;
  };
}

/**
 * Bytes a matmul keeps beside the arena for a prepacked B: its panels of 8 columns (the last
 * zero-padded), k-major, then a packed A's indirection table, copied there once instead of per
 * call.
 */
export function prepackBytes(kernel: KernelIR): number {
  const [n, k] = kernel.space.slice(-2);
  return panelsBytes(n, k) + (packsA(kernel) ? rowsOfA(kernel, n) * k * 4 : 0);
}

/**
 * Scratch bytes a kernel needs: a matmul's tile and packed A rows, or its row of accumulators.
 */
export function scratchBytes(kernel: KernelIR): number {
  if (!contracts(kernel)) return 0;
  const [n, k] = kernel.space.slice(-2);
  const packed = packsA(kernel) ? rowsOfA(kernel, n) * k * 4 : 0;
  return Math.max(TILE_BYTES + packed, 4 * n);
}

/** What the i-k-j path needs to know about a matmul kernel. */
export interface MatmulPlan {
  /** Number of batch axes. */
  readonly nb: number;
  /** Output columns. */
  readonly n: number;
  /** Contraction length. */
  readonly k: number;
  /** The A operand load (independent of n). */
  readonly a: Extract<Expr, { kind: "load" }>;
  /** The B operand load (independent of m). */
  readonly b: Extract<Expr, { kind: "load" }>;
  /** Whether B's elements for consecutive n are consecutive in memory (no bounds). */
  readonly contiguous: boolean;
}

/** The i-k-j plan of an f32 matmul kernel whose outputs are all per-row, if it is one. */
export function matmulPlan(kernel: KernelIR): MatmulPlan | undefined {
  const operands = matmulOperands(kernel);
  if (!operands) return undefined;
  const { nb, n, k, a, b } = operands;
  const offset = (c: number[]) => {
    let x: number[] | undefined = c;
    for (const s of b.steps) if (x) x = applyStep(s, x);
    return x ? linearIndex(x, kernel.inputs[b.input].shape) : NaN;
  };
  const probe = kernel.space.map((d) => Math.floor(d / 2));
  const at = (nv: number) => offset(probe.map((c, i) => (i === nb + 1 ? nv : c)));
  const contiguous = !b.steps.some((s) => s.kind === "affine" && s.bounds) && n > 1 &&
    [...Array(n).keys()].every((nv) => at(nv) - at(0) === nv);
  return { nb, n, k, a, b, contiguous };
}

/**
 * The reference backend's interpreter of the kernel IR: the oracle for fusion. A kernel is turned
 * once into closures (loads whose steps are bound-free affine maps fold into one strided offset;
 * a subexpression shared inside the DAG is evaluated once per point), then run row by row:
 * each reduction is a pass over the row's reduced coordinates (float64 accumulation), row outputs
 * are stored once, full outputs in a final pass.
 *
 * @module
 */
import type { DType, TensorData } from "../../jit/ir/dtype.ts";
import { allocate, toF16Bits } from "../../jit/ir/dtype.ts";
import {
  applyStep,
  type Expr,
  gatherOutOfRange,
  type IndexStep,
  type KernelIR,
  linearIndex,
  type LoadReader,
  matmulOperands,
  type ReduceOp,
} from "../../jit/ir/kernel_ir.ts";
import { type Shape, sizeOf, stridesOf } from "../../jit/ir/shape.ts";
import { roundTo, scalarOp } from "./scalar_ops.ts";
import type { RefTensor } from "../../jit/ir/host_tensor.ts";
import { read } from "./tensor_io.ts";

type Coords = number[];
type Eval = (c: Coords) => number;

/** A kernel ready to run on host buffers. */
export interface InterpretedKernel {
  /** Runs the kernel; returns one data array per output. */
  run(
    inputs: readonly RefTensor[],
    into?: readonly (TensorData | undefined)[],
    active?: number,
  ): TensorData[];
}

/** Compiles a step chain into a function from coordinates to an element offset (or -1 → fill). */
function addresser(
  steps: readonly IndexStep[],
  shape: Shape,
  read?: LoadReader,
): { at: (c: Coords) => number; fill: (c: Coords) => number } {
  const strides = stridesOf(shape);
  if (steps.every((s) => s.kind === "affine" && !s.bounds)) {
    // Compose the affine maps, then fold the buffer's strides in: offset = base + Σ k[d]·c[d].
    let coeff: number[][] | undefined, offset: number[] | undefined;
    for (const s of steps as Extract<IndexStep, { kind: "affine" }>[]) {
      if (!coeff) {
        coeff = s.coeff.map((r) => [...r]);
        offset = [...s.offset];
      } else {
        const prevC: number[][] = coeff, prevO: number[] = offset!;
        coeff = s.coeff.map((r) =>
          prevC[0].map((_, d) => r.reduce((acc, w, j) => acc + w * prevC[j][d], 0))
        );
        offset = s.coeff.map((r, i) =>
          s.offset[i] + r.reduce((acc, w, j) => acc + w * prevO[j], 0)
        );
      }
    }
    if (!coeff) return { at: (c) => linearIndex(c, shape), fill: () => 0 };
    const k = coeff[0]?.map((_, d) =>
      coeff!.reduce((acc, row, j) => acc + row[d] * strides[j], 0)
    ) ?? [];
    const base = offset!.reduce((acc, o, j) => acc + o * strides[j], 0);
    const dims = k.flatMap((v, d) => (v !== 0 ? [d] : []));
    const ks = dims.map((d) => k[d]);
    return {
      at: (c) => {
        let off = base;
        for (let i = 0; i < dims.length; i++) off += ks[i] * c[dims[i]];
        return off;
      },
      fill: () => 0,
    };
  }
  let lastFill = 0;
  return {
    at: (c) => {
      let x: number[] | undefined = c;
      for (const s of steps) {
        const from: number[] = x;
        x = applyStep(s, x, read);
        if (!x && s.kind === "gather") throw gatherOutOfRange(read!(s.index, from), s.dim);
        if (!x) {
          lastFill = (s as { fill?: number }).fill ?? 0;
          return -1;
        }
      }
      let off = 0;
      for (let i = 0; i < x.length; i++) off += x[i] * strides[i];
      return off;
    },
    fill: () => lastFill,
  };
}

/** Prepares `kernel` for repeated runs. */
export function interpretKernel(kernel: KernelIR): InterpretedKernel {
  let generation = 0;
  return {
    run(inputs, into, active) {
      const data = inputs.map(read);
      const accs = new Float64Array(kernel.reductions.length);
      const memo = new Map<Expr, Eval>();
      // A gather step's index, read at the coordinates the step receives.
      const readIndex: LoadReader = (l, c) => build(l)(c as Coords);
      const build = (e: Expr): Eval => {
        const hit = memo.get(e);
        if (hit) return hit;
        let fn: Eval;
        switch (e.kind) {
          case "const": {
            const v = roundTo(e.dtype, e.value);
            fn = () => v;
            break;
          }
          case "acc": {
            const i = e.index;
            fn = () => accs[i];
            break;
          }
          case "load": {
            const src = data[e.input];
            const { at, fill } = addresser(e.steps, inputs[e.input].shape, readIndex);
            fn = (c) => {
              const off = at(c);
              return off < 0 ? fill(c) : src[off];
            };
            break;
          }
          case "alu": {
            const op = scalarOp(e.op, e.dtype, e.attrs)!;
            const args = e.args.map(build);
            const dtype = e.dtype;
            const vals = new Array<number>(args.length);
            let seen = -1, cached = 0;
            fn = (c) => {
              if (seen === generation) return cached;
              for (let i = 0; i < args.length; i++) vals[i] = args[i](c);
              cached = roundTo(dtype, op(vals));
              seen = generation;
              return cached;
            };
            break;
          }
        }
        memo.set(e, fn);
        return fn;
      };
      const reductions = kernel.reductions.map((r) => ({ ...r, fn: build(r.expr) }));
      const outputs = kernel.outputs.map((o, k) => ({
        ...o,
        fn: build(o.expr),
        // A combined output's one element is at −1 (see `put`).
        at: o.combine ? () => -1 : addresser(o.steps, o.shape).at,
        buf: o.dtype === "f16" || o.dtype === "bool"
          ? new Float64Array(sizeOf(o.shape))
          : (into?.[k] ?? allocate(o.dtype, sizeOf(o.shape))) as Exclude<TensorData, BigInt64Array>,
      }));
      for (const o of outputs) if (o.combine) o.buf[0] = 0;
      const store = (o: typeof outputs[number]) => put(o.buf, o.at(coords), o.fn(coords));
      const rowOuts = outputs.filter((o) => o.level === "row");
      const fullOuts = outputs.filter((o) => o.level === "full");
      const space = kernel.space;
      const kept = space.flatMap((_, i) => (kernel.reduced.includes(i) ? [] : [i]));
      const red = kernel.reduced;
      const coords = new Array<number>(space.length).fill(0);
      const allRows = sizeOf(kept.map((i) => space[i]));
      // Shape buckets: axis 0 is the outermost kept axis, so the active rows are a prefix.
      const rows = active === undefined ? allRows : allRows / space[0] * active;
      const inner = sizeOf(red.map((i) => space[i]));
      const setIndex = (axes: readonly number[], lin: number) => {
        for (let j = axes.length - 1; j >= 0; j--) {
          const d = space[axes[j]];
          coords[axes[j]] = d > 0 ? lin % d : 0;
          lin = d > 0 ? Math.floor(lin / d) : 0;
        }
      };
      const table = (kernel.pattern === "matmul" && inner > 0) || matmulOperands(kernel)
        ? contraction(kernel, reductions[0].expr, build, coords, {
          active,
          tick: () => generation++,
        })
        : undefined;
      // The exact precision sums floats in f32, term by term (`KernelIR.exact`); others in f64.
      const narrow = (dtype: DType) => kernel.exact === true && dtype === "f32";
      for (let r = 0; r < rows; r++) {
        setIndex(kept, r);
        reductions.forEach((red0, k) => {
          if (table && k === 0) {
            accs[0] = roundTo(red0.dtype, table[r]);
            return;
          }
          const acc = reduceRow(red0.op, inner, narrow(red0.dtype), (i) => {
            setIndex(red, i);
            generation++;
            return red0.fn(coords);
          });
          accs[k] = roundTo(red0.dtype, red0.op === "mean" ? acc / inner : acc);
        });
        if (rowOuts.length) {
          setIndex(red, 0);
          generation++;
          rowOuts.forEach(store);
        }
        if (fullOuts.length) {
          for (let i = 0; i < inner; i++) {
            setIndex(red, i);
            generation++;
            fullOuts.forEach(store);
          }
        }
      }
      return outputs.map((o, k) => finish(o.dtype, o.buf, into?.[k]));
    },
  };
}

/**
 * Reduction `op` of a row's `inner` values (`at(i)` gives the i-th), before a mean's division:
 * a sum in f64, or in f32 term by term where `narrow` (the exact precision); NaN wins a max/min.
 */
function reduceRow(
  op: ReduceOp,
  inner: number,
  narrow: boolean,
  at: (i: number) => number,
): number {
  let acc = op === "max" ? -Infinity : op === "min" ? Infinity : 0;
  for (let i = 0; i < inner; i++) {
    const v = at(i);
    if (op === "sum" || op === "mean") acc = narrow ? Math.fround(acc + v) : acc + v;
    else if (op === "max") acc = Number.isNaN(acc) || acc >= v ? acc : v;
    else acc = Number.isNaN(acc) || acc <= v ? acc : v;
  }
  return acc;
}

/**
 * All accumulators of a matmul kernel at once, in i-k-j order with a float64 row accumulator (the
 * cache-friendly loop of the per-op reference kernel): both operands are first gathered densely
 * through their index maps. Space: [...batch, M, N, K]; rows are [...batch, M, N] row-major.
 */
function contraction(
  kernel: KernelIR,
  product: Expr,
  build: (e: Expr) => Eval,
  coords: Coords,
  at: { active: number | undefined; tick: () => void },
): Float64Array | undefined {
  const { active, tick } = at;
  if (product.kind !== "alu" || product.op !== "Mul") return undefined;
  // Each operand point is an evaluation of its own: cached ALU results of the last are stale.
  const [a, b] = product.args.map(build).map((f) => (c: Coords) => (tick(), f(c)));
  const f32 = product.dtype === "f32", narrow = f32 && kernel.exact === true;
  const space = kernel.space;
  const nb = space.length - 3;
  const [fullM, n, k] = space.slice(nb);
  let m = fullM, batch = sizeOf(space.slice(0, nb));
  if (active !== undefined) {
    if (nb > 0) batch = batch / space[0] * active;
    else m = active;
  }
  const da = new Float64Array(batch * m * k), db = new Float64Array(batch * k * n);
  const out = new Float64Array(batch * m * n);
  const setBatch = (t: number) => {
    for (let d = nb - 1; d >= 0; d--) {
      coords[d] = t % space[d];
      t = Math.floor(t / space[d]);
    }
  };
  for (let t = 0; t < batch; t++) {
    setBatch(t);
    coords[nb + 1] = 0;
    for (let i = 0; i < m; i++) {
      coords[nb] = i;
      for (let p = 0; p < k; p++) {
        coords[nb + 2] = p;
        da[(t * m + i) * k + p] = a(coords);
      }
    }
    coords[nb] = 0;
    for (let p = 0; p < k; p++) {
      coords[nb + 2] = p;
      for (let j = 0; j < n; j++) {
        coords[nb + 1] = j;
        db[(t * k + p) * n + j] = b(coords);
      }
    }
    const acc = new Float64Array(n);
    for (let i = 0; i < m; i++) {
      acc.fill(0);
      for (let p = 0; p < k; p++) {
        const av = da[(t * m + i) * k + p];
        const row = (t * k + p) * n;
        // An f32 product is rounded like every f32 ALU result (overflowing to ±inf as it would
        // stored); the sum is wide, like every float reduction of the reference, but in the
        // exact precision, which sums in f32.
        if (narrow) {
          for (let j = 0; j < n; j++) acc[j] = Math.fround(acc[j] + Math.fround(av * db[row + j]));
        } else if (f32) { for (let j = 0; j < n; j++) acc[j] += Math.fround(av * db[row + j]); }
        else for (let j = 0; j < n; j++) acc[j] += av * db[row + j];
      }
      out.set(acc, (t * m + i) * n);
    }
  }
  return out;
}

/** Stores `v` at `off` of `buf`; at −1, a combined output's, keeps the largest (NaN wins). */
function put(buf: { [i: number]: number }, off: number, v: number): void {
  if (off >= 0) buf[off] = v;
  else if (!(Number.isNaN(buf[0]) || buf[0] >= v)) buf[0] = v;
}

function finish(
  dtype: DType,
  buf: ArrayLike<number> & { length: number },
  into?: TensorData,
): TensorData {
  if (dtype !== "f16" && dtype !== "bool") return buf as TensorData;
  const out = (into ?? allocate(dtype, buf.length)) as Uint8Array | Uint16Array;
  for (let i = 0; i < buf.length; i++) {
    out[i] = dtype === "f16" ? toF16Bits(buf[i]) : buf[i] !== 0 ? 1 : 0;
  }
  return out;
}

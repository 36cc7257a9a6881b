/**
 * Which accesses move as aligned vec4s (GPUs move memory in 16-byte words): the elementwise,
 * row and tiled-matmul kernels all read an input as `array<vec4<…>>` where every one of its
 * loads qualifies along the axis they step four points at a time.
 *
 * @module
 */
import { affineOffset } from "../../jit/ir/access.ts";
import { type Expr, type IndexStep, type KernelIR, walk } from "../../jit/ir/kernel_ir.ts";
import type { Shape } from "../../jit/ir/shape.ts";
import type { KernelLowering } from "./expr.ts";

/**
 * Whether `steps` reach a buffer of `shape` as aligned vec4s along `axis` of `space`: affine, unit
 * stride along `axis`, a multiple of 4 along every other axis (of extent above 1) and from a base
 * that is one.
 */
export function quadAligned(
  steps: readonly IndexStep[],
  space: Shape,
  shape: Shape,
  axis: number,
): boolean {
  const a = affineOffset(steps, space, shape);
  return a !== undefined && a.weights[axis] === 1 && a.base % 4 === 0 &&
    a.weights.every((w, i) => i === axis || space[i] === 1 || w % 4 === 0);
}

/**
 * The inputs of `kernel` whose every load in `exprs` is {@linkcode quadAligned} along `axis`. A
 * gather's index buffer never is: its indices are read one at a time, at coordinates of their own.
 */
export function quadInputs(kernel: KernelIR, exprs: readonly Expr[], axis: number): Set<number> {
  const loads = new Map<number, boolean>();
  const seen = new Set<Expr>();
  for (const e of exprs) {
    walk(e, (x) => {
      if (x.kind !== "load") return;
      const ok = quadAligned(x.steps, kernel.space, kernel.inputs[x.input].shape, axis);
      loads.set(x.input, (loads.get(x.input) ?? true) && ok);
      for (const s of x.steps) if (s.kind === "gather") loads.set(s.index.input, false);
    }, seen);
  }
  return new Set([...loads].flatMap(([i, ok]) => (ok ? [i] : [])));
}

/**
 * Whether one load of `kernel`'s outputs and reductions reads input `i`: only then may the
 * binding take another element type (a vec4 array) than the kernel's other reads would need.
 */
export function readOnce(kernel: KernelIR, i: number): boolean {
  let reads = 0;
  for (const e of [...kernel.outputs.map((o) => o.expr), ...kernel.reductions.map((r) => r.expr)]) {
    walk(e, (x) => x.kind === "load" && x.input === i && reads++);
  }
  return reads === 1;
}

/**
 * The kernel's output values at four consecutive points along `axis`, from the lowering's
 * coordinates (lane j at the axis's coordinate + j): each load of a `vectors` input read once as
 * the aligned vec4 holding the four, a load that does not move along `axis` (a channel's bias)
 * once for all four, anything else at each lane's own point. `seed(j)` names values lane j
 * already has (an epilogue's sums). Returns each lane's output values; the coordinates are
 * restored.
 */
export function vectorLanes(
  l: KernelLowering,
  axis: number,
  vectors: ReadonlySet<number>,
  seed: (j: number) => Map<Expr, string> = () => new Map(),
): string[][] {
  const { kernel } = l;
  const uniform = new Set<Expr>();
  const isUniform = (x: Expr): boolean => {
    if (x.kind === "const") return true;
    if (x.kind === "load") {
      const shape = kernel.inputs[x.input].shape;
      return affineOffset(x.steps, kernel.space, shape)?.weights[axis] === 0;
    }
    return x.kind === "alu" && x.args.every((a) => uniform.has(a));
  };
  const loads = new Map<Expr, string>();
  for (const o of kernel.outputs) {
    walk(o.expr, (x) => {
      if (isUniform(x)) uniform.add(x);
      if (x.kind === "load" && vectors.has(x.input) && !loads.has(x)) {
        const name = l.e.fresh("quad");
        const { index } = l.offset(x.steps, kernel.inputs[x.input].shape);
        l.e.line(`let ${name} = ${l.quad(x.input, index)};`);
        loads.set(x, name);
      }
    });
  }
  const base = [...l.coords];
  const shared = new Map<Expr, string>();
  const lanes = [0, 1, 2, 3].map((j) => {
    l.coords = j === 0 ? base : base.map((c, i) => (i === axis ? `(${c} + ${j})` : c));
    const memo = new Map([...shared, ...seed(j)]);
    for (const [x, name] of loads) memo.set(x, `${name}.${"xyzw"[j]}`);
    const values = kernel.outputs.map((o) => l.value(o.expr, memo));
    for (const [x, name] of memo) if (uniform.has(x)) shared.set(x, name);
    return values;
  });
  l.coords = base;
  return lanes;
}

/** Stores each output's four lanes (`vectorLanes`) as one vec4 at the lowering's coordinates. */
export function storeLanes(l: KernelLowering, lanes: readonly string[][]): void {
  l.kernel.outputs.forEach((o, k) => {
    if (o.combine) return lanes.forEach((v) => l.combine(k, v[k]));
    const { index } = l.offset(o.steps, o.shape);
    if (o.packed) {
      // Four 8-bit lanes, one word (`packedConstants`' intermediates).
      const bytes = lanes.map((v, j) => `((u32(${v[k]}) & 255u) << ${8 * j}u)`);
      return l.e.line(`${l.outputs[k]}[u32(${index}) / 4u] = ${bytes.join(" | ")};`);
    }
    const value = l.toStored(lanes.map((v) => v[k]).join(", "), o.dtype, true);
    l.e.line(`${l.outputs[k]}[u32(${index}) / 4u] = ${value};`);
  });
}

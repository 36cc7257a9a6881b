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

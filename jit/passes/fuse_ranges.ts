/**
 * A DynamicQuantizeLinear's range (`RangeWithZero`) as two combined outputs of the kernel that
 * computes its input (`FuseOptions.combinedRanges`): `max(0, max x)` and `max(0, max −x)`, each a
 * scalar the kernel keeps the largest of as it stores (`KernelOutput.combine`; WebGPU updates
 * the words by atomics). Its decomposition took two kernels a range on a GPU, the rows' ranges
 * and their finish, each a dispatch that waits for the one before: BERT-base int8 ran 72 of them.
 * The scale and zero point are then a few operations on two scalars, computed again by each
 * kernel that reads them.
 *
 * @module
 */
import type { Expr, IndexStep, KernelOutput } from "../ir/kernel_ir.ts";
import type { Shape } from "../ir/shape.ts";
import type { ValueType } from "../ops/mod.ts";
import type { KernelGroups } from "./fuse_groups.ts";
import { bufferSym, own, type Sym } from "./fuse_values.ts";

/** What the range needs of the fusion walk (`fuse.ts`). */
export interface RangeWalk {
  /** `s` stored (where it is not yet), read back as a load. */
  stored(s: Sym, why: string): Sym;
  /** The walk's groups. */
  readonly groups: KernelGroups;
  /** The shape of each buffer a load reads, which a new buffer joins. */
  readonly shapes: Map<number, Shape>;
  /** A fresh buffer id. */
  fresh(): number;
  /** The fusion log. */
  readonly log: string[];
}

/** The one step from any kernel coordinates to a scalar's none. */
const SCALAR: readonly IndexStep[] = [{ kind: "affine", coeff: [], offset: [] }];

/**
 * `[lo, hi]` of `x` (types `types`) from two outputs that `x`'s kernel combines, or a kernel
 * over x of its own where x has none (a block product's or an op kept whole's x is stored first:
 * their generators write their outputs themselves).
 */
export function combinedRange(
  walk: RangeWalk,
  x: Sym,
  label: string,
  types: readonly ValueType[],
): Sym[] {
  let s = x;
  const g = s.group;
  if (g && (g.opaque || g.placement || g.blockProduct || g.blockUnpack)) {
    s = walk.stored(s, `${label} combines its range in a kernel of its own`);
  }
  const group = s.group ?? walk.groups.create(s.type.shape, [], "elementwise");
  const level = s.toOwn?.length ? "row" : "full";
  const negated: Expr = { kind: "alu", op: "Neg", args: [s.expr], dtype: "f32" };
  const [lo, hi] = [negated, s.expr].map((expr, k) => {
    const value = walk.fresh();
    const out: KernelOutput = { value, shape: [], dtype: "f32", expr, steps: SCALAR, level };
    group.outputs.push({ ...out, combine: "max" });
    walk.groups.produces(group, value);
    return bufferSym(walk.shapes, value, types[k], [label]);
  });
  [...own(s), label].forEach((l) => group.labels.add(l));
  walk.log.push(`${label}: its range combined by kernel #${group.id} as it stores`);
  // The lower bound is the negated largest of −x: a scalar expression its readers compute.
  const bound: Expr = { kind: "alu", op: "Neg", args: [lo.expr], dtype: "f32" };
  return [{ type: types[0], expr: bound, labels: [label], uses: 0 }, hi];
}

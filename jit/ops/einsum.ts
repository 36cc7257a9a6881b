/**
 * Einsum: operands named by an equation of letters (`"ab,bc->ac"`, `...` for the same leading
 * axes in every operand; without `->` the output is the ellipsis, then the letters used once,
 * alphabetically), multiplied and summed over the letters the output lacks.
 *
 * A contraction of two operands that is a (batched) matrix product decomposes into one MatMul,
 * which backends tile. Any other equation decomposes into a broadcast product and a sum: each
 * operand's repeated letters become its diagonal, its axes are permuted into one shared letter
 * order (with size-1 axes for letters it lacks), the operands are multiplied, the letters missing
 * from the output are summed away, and the result is permuted into the output's order. Fusion
 * turns the multiply-and-sum into one reduction kernel.
 *
 * @module
 */
import type { Shape } from "../ir/shape.ts";
import {
  defineOps,
  type EmitRef,
  type Emitter,
  type InferContext,
  type OpDef,
} from "./registry.ts";

/** An equation read against its operands' shapes. */
export interface EinsumPlan {
  /** Each operand's letter per axis (the ellipsis expanded to letters of its own). */
  readonly letters: readonly (readonly string[])[];
  /** The output's letters. */
  readonly output: readonly string[];
  /** Every letter's extent (broadcast: the largest an operand gives it). */
  readonly extent: ReadonlyMap<string, number>;
}

/** How to write an equation, for every refusal. */
export const EINSUM_FIX = 'write the equation as "ab,bc->ac" (letters, "..." for broadcast axes)';

/**
 * `equation` read against operands of `shapes`, or why it cannot be (a phrase that follows the
 * equation in a message).
 */
export function einsumPlan(equation: string, shapes: readonly Shape[]): EinsumPlan | string {
  const [lhs, rhsGiven] = equation.replace(/\s/g, "").split("->");
  const terms = lhs.split(",");
  if (terms.length !== shapes.length) return `names ${terms.length} operands for ${shapes.length}`;
  // The ellipsis covers the most leading axes any operand leaves to it.
  const ellipsis = Math.max(
    0,
    ...terms.map((
      t,
      i,
    ) => (t.includes("...") ? shapes[i].length - t.replace("...", "").length : 0)),
  );
  const dots = [...Array(ellipsis)].map((_, i) => String.fromCharCode(0x100 + i));
  const expand = (t: string, rank?: number) => {
    if (!t.includes("...")) return [...t];
    const own = rank === undefined ? ellipsis : rank - (t.length - 3);
    return [...t.replace("...", dots.slice(ellipsis - own).join(""))];
  };
  const letters = terms.map((t, i) => expand(t, shapes[i].length));
  const extent = new Map<string, number>();
  for (const [i, ls] of letters.entries()) {
    if (ls.length !== shapes[i].length) return `does not fit operand ${i}`;
    if (ls.some((l) => !/^[a-zA-Z]$/.test(l) && !dots.includes(l))) return "has a bad character";
    for (const [k, l] of ls.entries()) {
      const known = extent.get(l), own = shapes[i][k];
      const repeated = ls.indexOf(l) !== k;
      if (known !== undefined && known !== own && (repeated || (known !== 1 && own !== 1))) {
        return `gives ${l} the extents ${known} and ${own}`;
      }
      if (known === undefined || known === 1) extent.set(l, own);
    }
  }
  const counts = new Map<string, number>();
  for (const l of letters.flat()) counts.set(l, (counts.get(l) ?? 0) + 1);
  const output = rhsGiven === undefined
    ? [
      ...dots,
      ...[...counts].filter(([l, n]) => n === 1 && !dots.includes(l)).map(([l]) => l).sort(),
    ]
    : expand(rhsGiven);
  if (output.some((l) => !extent.has(l))) return "has an output letter no operand has";
  if (new Set(output).size !== output.length) return "repeats an output letter";
  return { letters, output, extent };
}

/** The plan of a node's equation, or a refusal located at it. */
function planOf(ctx: InferContext): EinsumPlan {
  const equation = ctx.attrs.equation;
  if (typeof equation !== "string") ctx.fail("no equation", EINSUM_FIX, "bad-attribute");
  const plan = einsumPlan(equation, ctx.inputs.map((t) => t.shape));
  if (typeof plan === "string") {
    ctx.fail(`equation ${JSON.stringify(equation)} ${plan}`, EINSUM_FIX, "bad-attribute");
  }
  return plan;
}

/** `x`'s diagonal over the two axes `i < j` (same extent): axis `j` removed. */
function diagonal(e: Emitter, x: EmitRef, i: number, j: number): EmitRef {
  const shape = e.typeOf(x).shape, n = shape[i];
  // Move i and j last, flatten them, take every (n + 1)-th element, move the result back to i.
  const rest = shape.map((_, k) => k).filter((k) => k !== i && k !== j);
  const moved = e.op("Transpose", [x], { perm: [...rest, i, j] });
  const flat = e.op("Reshape", [moved], { shape: [...rest.map((k) => shape[k]), n * n] });
  const diag = e.op("Slice", [flat], { starts: [0], ends: [n * n], axes: [-1], steps: [n + 1] });
  const back = [...rest.keys()];
  back.splice(i, 0, rest.length);
  return e.op("Transpose", [diag], { perm: back });
}

/** Operand `x` with letters `given`, as its diagonal in the shared order `all` of letters. */
function aligned(
  e: Emitter,
  x: EmitRef,
  given: readonly string[],
  all: readonly string[],
): EmitRef {
  let ls = [...given], t = x;
  // Repeated letters within one operand: keep the diagonal.
  for (let a = 0; a < ls.length; a++) {
    for (let b = ls.length - 1; b > a; b--) {
      if (ls[b] !== ls[a]) continue;
      t = diagonal(e, t, a, b);
      ls = ls.filter((_, k) => k !== b);
    }
  }
  const shape = e.typeOf(t).shape;
  // Into the shared order, with size-1 axes for the letters it lacks.
  const present = all.filter((l) => ls.includes(l));
  if (present.some((l, k) => l !== ls[k])) {
    t = e.op("Transpose", [t], { perm: present.map((l) => ls.indexOf(l)) });
  }
  const full = all.map((l) => (ls.includes(l) ? shape[ls.indexOf(l)] : 1));
  return full.length === present.length ? t : e.op("Reshape", [t], { shape: full });
}

/**
 * A contraction of two operands as one MatMul, where the equation is one: no letter repeated
 * within an operand or broadcast between them, and every letter either in the output (batch
 * letters in both operands, M letters in the first only, N in the second only) or summed in both
 * (K). The operands go through transposes and reshapes into [...batch, M, K] and [...batch, K, N],
 * the product back into the output's order; `undefined` for any other equation. As a broadcast
 * product and a sum, `bik,bjk->bij` took 4.6 ms on one wasm thread (a reduction kernel) where the
 * same MatMul took 1.2 (the tiles).
 */
function asMatMul(e: Emitter, ins: readonly EmitRef[], plan: EinsumPlan) {
  if (ins.length !== 2) return undefined;
  const [a, b] = ins, [la, lb] = plan.letters, { output, extent } = plan;
  const shapes = [e.typeOf(a).shape, e.typeOf(b).shape];
  const plain = (ls: readonly string[], i: number) =>
    new Set(ls).size === ls.length && ls.every((l, k) => shapes[i][k] === extent.get(l));
  if (!plain(la, 0) || !plain(lb, 1)) return undefined;
  const inOut = (l: string) => output.includes(l);
  const batch = output.filter((l) => la.includes(l) && lb.includes(l));
  const m = output.filter((l) => la.includes(l) && !lb.includes(l));
  const n = output.filter((l) => lb.includes(l) && !la.includes(l));
  const k = la.filter((l) => lb.includes(l) && !inOut(l));
  const onlyOne = [...la, ...lb].some((l) => !inOut(l) && !(la.includes(l) && lb.includes(l)));
  if (onlyOne || k.length === 0) return undefined;
  const size = (ls: readonly string[]) => ls.reduce((p, l) => p * extent.get(l)!, 1);
  const lead = batch.map((l) => extent.get(l)!);
  const arranged = (x: EmitRef, ls: readonly string[], order: string[], shape: number[]) => {
    const perm = order.map((l) => ls.indexOf(l));
    const moved = perm.some((p, i) => p !== i) ? e.op("Transpose", [x], { perm }) : x;
    return e.op("Reshape", [moved], { shape });
  };
  const y = e.op("MatMul", [
    arranged(a, la, [...batch, ...m, ...k], [...lead, size(m), size(k)]),
    arranged(b, lb, [...batch, ...k, ...n], [...lead, size(k), size(n)]),
  ]);
  const kept = [...batch, ...m, ...n];
  const unfolded = e.op("Reshape", [y], { shape: kept.map((l) => extent.get(l)!) });
  const perm = output.map((l) => kept.indexOf(l));
  return perm.some((p, i) => p !== i) ? e.op("Transpose", [unfolded], { perm }) : unfolded;
}

/**
 * Einsum's decomposition: a MatMul where the equation is one (`asMatMul`), else the operands
 * aligned, multiplied, summed, permuted, expanded.
 */
function decomposeEinsum(e: Emitter, ins: readonly EmitRef[], equation: string): EmitRef {
  const plan = einsumPlan(equation, ins.map((x) => e.typeOf(x).shape)) as EinsumPlan;
  const product = asMatMul(e, ins, plan);
  if (product) return product;
  const { letters, output, extent } = plan;
  const all = [...new Set([...output, ...letters.flat()])];
  let summed = ins.map((x, i) => aligned(e, x, letters[i], all)).reduce((a, b) =>
    e.op("Mul", [a, b])
  );
  const axes = all.map((_, k) => k).filter((k) => !output.includes(all[k]));
  if (axes.length) summed = e.op("ReduceSum", [summed], { axes, keepdims: 0 });
  const kept = all.filter((l) => output.includes(l));
  const perm = output.map((l) => kept.indexOf(l));
  // A letter broadcast in every operand may still be 1 here: expand it to its extent.
  const shape = output.map((l) => extent.get(l)!);
  const y = perm.some((p, k) => p !== k) ? e.op("Transpose", [summed], { perm }) : summed;
  return e.typeOf(y).shape.some((d, k) => d !== shape[k]) ? e.op("Expand", [y], { shape }) : y;
}

const einsumOps: OpDef[] = [{
  name: "Einsum",
  category: "composite",
  arity: [1, 26],
  primitive: false,
  infer: (ctx) => {
    const dtype = ctx.sameDType();
    const { output, extent } = planOf(ctx);
    return [{ shape: output.map((l) => extent.get(l)!), dtype }];
  },
  decompose: (e, ins, attrs) => [decomposeEinsum(e, ins, attrs.equation as string)],
}];

defineOps(einsumOps);

/**
 * Einsum as a broadcast product and a sum: each operand's repeated letters become its diagonal,
 * its axes are permuted into one shared letter order (with size-1 axes for letters it lacks), the
 * operands are multiplied, the letters missing from the output are summed away, and the result is
 * permuted into the output's order. Fusion turns the multiply-and-sum into one reduction kernel.
 * Ellipses (`...`) stand for the same leading axes in every operand.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import {
  attrs,
  type Known,
  type NodeContext,
  type OpFn,
  opOf,
  typeOf,
} from "../import/node_context.ts";

function bad(c: NodeContext, why: string): never {
  throw new KilnError(
    `${c.label}: equation ${JSON.stringify(attrs(c).string("equation"))} ${why}`,
    {
      code: "bad-attribute",
      fix: 'write the equation as "ab,bc->ac" (letters, "..." for broadcast axes)',
    },
  );
}

/** `x`'s diagonal over the two axes `i < j` (same extent): axis `j` removed. */
function diagonal(op: OpFn, x: Known, i: number, j: number): Known {
  const shape = typeOf(x).shape;
  const n = shape[i];
  // Move i and j last, flatten them, take every (n + 1)-th element, move the result back to i.
  const rest = shape.map((_, k) => k).filter((k) => k !== i && k !== j);
  const moved = op("Transpose", [x], { perm: [...rest, i, j] });
  const flat = op("Reshape", [moved], { shape: [...rest.map((k) => shape[k]), n * n] });
  const diag = op("Slice", [flat], { starts: [0], ends: [n * n], axes: [-1], steps: [n + 1] });
  const back = [...rest.keys()];
  back.splice(i, 0, rest.length);
  return op("Transpose", [diag], { perm: back });
}

/** Converts an Einsum node. */
export function einsum(c: NodeContext): Known[] {
  const op = opOf(c);
  const equation = (attrs(c).string("equation") ?? bad(c, "is missing")).replace(/\s/g, "");
  const [lhs, rhsGiven] = equation.split("->");
  const inputs = c.inputs();
  const terms = lhs.split(",");
  if (terms.length !== inputs.length) bad(c, `names ${terms.length} operands for ${inputs.length}`);
  // The ellipsis covers the most leading axes any operand leaves to it.
  const ellipsis = Math.max(
    0,
    ...terms.map((t, i) =>
      t.includes("...") ? typeOf(inputs[i]).shape.length - t.replace("...", "").length : 0
    ),
  );
  const dots = [...Array(ellipsis)].map((_, i) => String.fromCharCode(0x100 + i));
  const expand = (t: string, rank?: number) => {
    if (!t.includes("...")) return [...t];
    const own = rank === undefined ? ellipsis : rank - (t.length - 3);
    return [...t.replace("...", dots.slice(ellipsis - own).join(""))];
  };
  const letters = terms.map((t, i) => expand(t, typeOf(inputs[i]).shape.length));
  letters.forEach((ls, i) => {
    if (ls.length !== typeOf(inputs[i]).shape.length) bad(c, `does not fit operand ${i}`);
    if (ls.some((l) => !/^[a-zA-Z]$/.test(l) && !dots.includes(l))) bad(c, "has a bad character");
  });
  // Implicit output: the ellipsis, then the letters used once, alphabetically.
  const counts = new Map<string, number>();
  for (const l of letters.flat()) counts.set(l, (counts.get(l) ?? 0) + 1);
  const output = rhsGiven === undefined
    ? [
      ...dots,
      ...[...counts].filter(([l, n]) => n === 1 && !dots.includes(l)).map(([l]) => l).sort(),
    ]
    : expand(rhsGiven);
  const all = [...new Set([...output, ...letters.flat()])];
  const extent = new Map<string, number>();
  const aligned = inputs.map((x, i) => {
    let ls = [...letters[i]];
    let t = x;
    // Repeated letters within one operand: keep the diagonal.
    for (let a = 0; a < ls.length; a++) {
      for (let b = ls.length - 1; b > a; b--) {
        if (ls[b] !== ls[a]) continue;
        t = diagonal(op, t, a, b);
        ls = ls.filter((_, k) => k !== b);
      }
    }
    const shape = typeOf(t).shape;
    ls.forEach((l, k) => {
      const known = extent.get(l);
      if (known !== undefined && known !== shape[k] && known !== 1 && shape[k] !== 1) {
        bad(c, `gives ${l} the extents ${known} and ${shape[k]}`);
      }
      if (known === undefined || known === 1) extent.set(l, shape[k]);
    });
    // Into the shared order, with size-1 axes for the letters it lacks.
    const present = all.filter((l) => ls.includes(l));
    if (present.some((l, k) => l !== ls[k])) {
      t = op("Transpose", [t], { perm: present.map((l) => ls.indexOf(l)) });
    }
    const full = all.map((l) => (ls.includes(l) ? shape[ls.indexOf(l)] : 1));
    return full.length === present.length ? t : op("Reshape", [t], { shape: full });
  });
  if (output.some((l) => !extent.has(l))) bad(c, "has an output letter no operand has");
  let product = aligned.reduce((a, b) => op("Mul", [a, b]));
  const summed = all.map((_, k) => k).filter((k) => !output.includes(all[k]));
  if (summed.length) product = op("ReduceSum", [product], { axes: summed, keepdims: 0 });
  const kept = all.filter((l) => output.includes(l));
  const perm = output.map((l) => kept.indexOf(l));
  // A letter broadcast in every operand may still be 1 here: expand it to its extent.
  const shape = output.map((l) => extent.get(l)!);
  let y = perm.some((p, k) => p !== k) ? op("Transpose", [product], { perm }) : product;
  if (typeOf(y).shape.some((d, k) => d !== shape[k])) y = op("Expand", [y], { shape });
  return [y];
}

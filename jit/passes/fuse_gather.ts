/**
 * Gather and GatherElements in fusion: a data-dependent index step on the data's loads (see
 * `GatherStep`), so that a gather fuses into whatever consumes it.
 *
 * @module
 */
import { type Load, reindex } from "../ir/kernel_ir.ts";
import { gatherStep } from "../ir/index_maps.ts";
import { normalizeAxis, sizeOf } from "../ir/shape.ts";
import type { Attrs, ValueType } from "../ops/mod.ts";
import { isBare, own, type Sym, unique } from "./fuse_values.ts";

/**
 * Gather and GatherElements as a data-dependent index step on the data's loads: the indices
 * (stored unless already a plain load) are read at the output's coordinates, so a gather fuses
 * into whatever consumes it (an embedding lookup and the positional add are one kernel). A
 * constant index is an affine step instead. `stored` stores a value and returns a load of it.
 */
export function gatherSym(
  stored: (s: Sym, why: string) => Sym,
  op: string,
  [data, indices]: Sym[],
  { attrs, label, type }: { attrs: Attrs; label: string; type: ValueType },
): Sym {
  const from = data.type.shape, to = type.shape;
  const axis = normalizeAxis((attrs.axis as number | undefined) ?? 0, from.length, label);
  let ix = indices;
  if (ix.group || !isBare(ix)) ix = stored(ix, `indices of ${label}`);
  const step = gatherStep({
    from,
    to,
    axis,
    elements: op === "GatherElements",
    indexShape: indices.type.shape,
    index: ix.expr as Load,
    constant: ix.expr.kind === "const" ? ix.expr.value : undefined,
  });
  let s = data;
  if (s.group) s = stored(s, `${label} gathers from it`);
  if (!isBare(s) && sizeOf(to) > sizeOf(from)) {
    s = stored(s, `${label} reads it more often than it has elements (recomputation)`);
  }
  return {
    type,
    expr: reindex(s.expr, [step]),
    labels: unique([...own(s), ...own(ix), label]),
    uses: 0,
  };
}

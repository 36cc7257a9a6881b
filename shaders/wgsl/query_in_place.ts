/**
 * Queries computed where attention reads them. A decode step's queries are a few rows that an
 * elementwise kernel makes just before the attention group (GroupQueryAttention's rotation of
 * its slice of the joined projection) and that only the group's scores read: a dispatch a layer
 * for a few hundred values. Where the group runs a workgroup a row or in key splits
 * (`attention.ts`, `split_attention.ts`), each scores' term reads its query element through the
 * producer's own expression (`KernelLowering`'s `inlined`), and the producer goes.
 *
 * @module
 */
import type { Expr, KernelBuffer, KernelIR, Load } from "../../jit/ir/kernel_ir.ts";
import { mapLoads, matmulOperands } from "../../jit/ir/kernel_ir.ts";

/** The query input of a group's scores read through its producer's expression. */
export interface InlinedQuery {
  /** The scores' input the expression stands for. */
  readonly input: number;
  /** The producer's value in the query buffer's coordinates, over the scores' inputs. */
  readonly expr: Expr;
}

/** An attention group's members with their query's producer folded into the scores. */
export interface QueryInPlace {
  /** The scores (its inputs the producer's, in the query's place and after), weights, values. */
  readonly members: readonly KernelIR[];
  /** The producer no longer run. */
  readonly producer: KernelIR;
  /** How the scores read the query now. */
  readonly query: InlinedQuery;
}

/**
 * `members` (scores, weights, values of an attention group in `kernels`) with the scores' A
 * operand computed as it is read: its producer an elementwise kernel of one f32 output stored
 * in place, the value read by the scores alone and not among `external`. Undefined otherwise.
 */
export function queryInPlace(
  kernels: readonly KernelIR[],
  members: readonly KernelIR[],
  external: ReadonlySet<number>,
): QueryInPlace | undefined {
  const [scores] = members;
  const a = matmulOperands(scores)?.a;
  if (!a || a.steps.some((s) => s.kind === "affine" && s.bounds)) return undefined;
  const value = scores.inputs[a.input].value;
  const producer = kernels.find((k) => k.outputs.some((o) => o.value === value));
  if (!producer || !storedInPlace(producer) || external.has(value)) return undefined;
  const readers = kernels.filter((k) => k.inputs.some((i) => i.value === value));
  if (readers.length !== 1 || readers[0] !== scores) return undefined;
  // The producer's inputs join the scores', where they have them or after. The query's buffer is
  // never written now: its slot names one the producer reads (a group binds a value once), and
  // only the scores' own loads of that slot are the query's.
  const inputs: KernelBuffer[] = scores.inputs.with(a.input, producer.inputs[0]);
  const place = producer.inputs.map((b) => {
    const at = inputs.findIndex((x, i) => i !== a.input && x.value === b.value);
    return at >= 0 ? at : inputs.push(b) - 1;
  });
  const expr = mapLoads(producer.outputs[0].expr, (l: Load) => ({ ...l, input: place[l.input] }));
  return {
    members: [{ ...scores, inputs }, ...members.slice(1)],
    producer,
    query: { input: a.input, expr },
  };
}

/**
 * Whether `k` is an elementwise kernel whose one f32 output is stored at its own coordinates
 * (the buffer's coordinates are the kernel's), so its expression stands for the buffer.
 */
function storedInPlace(k: KernelIR): boolean {
  if (k.pattern !== "elementwise" || k.reductions.length !== 0 || k.outputs.length !== 1) {
    return false;
  }
  const [out] = k.outputs;
  return out.steps.length === 0 && out.level === "full" && out.combine === undefined &&
    out.dtype === "f32" && out.expr.dtype === "f32" && String(out.shape) === String(k.space);
}

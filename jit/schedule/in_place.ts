/**
 * Outputs written over donated inputs: where a caller gives up an input's data for the run
 * (`CompileOptions.donate`: a generation's KV caches, each step's present fed back as the next
 * past), the kernel that makes an output of the same type from it may store into its buffer. A
 * decode step's present is its past with one new entry: in place, a backend writes that entry and
 * leaves the rest where it is, instead of copying the whole cache every token.
 *
 * A pair is safe when the kernel reads the input only at the point it stores (so no point is read
 * after it is written, whichever thread or lane order writes it), no later kernel reads the input,
 * and the kernel is in no group that a backend runs share by share (wasm's chains: a member before
 * it could still be reading another thread's share of the input). Readers in a group of their own
 * are done before it starts: a decode step's attention, which reads the past where the cache is
 * appended to (PyTorch's exports), and the next past stored over it after. This pass only marks
 * the pairs (`KernelIR.inPlace`); a backend that places both at one buffer uses them.
 *
 * @module
 */
import type { Graph } from "../ir/graph.ts";
import { type Expr, type KernelIR, walk } from "../ir/kernel_ir.ts";
import { sameShape } from "../ir/shape.ts";
import { KilnError } from "../support/errors.ts";

/**
 * The values of the inputs `given` names (`CompileOptions.donate`), checked: a list of the
 * graph's input names, none of them refreshed by a state binding (the executable keeps those).
 */
export function donatedValues(
  given: unknown,
  graph: Graph,
  state: Readonly<Record<string, string>> = {},
): Set<number> {
  if (given === undefined) return new Set();
  const names = graph.inputs.map((i) => i.name);
  const fix = `pass donate as a list of input names among: ${names.join(", ")}`;
  if (!Array.isArray(given)) {
    throw new KilnError(`donate must list input names, got ${JSON.stringify(given)}`, {
      code: "bad-input",
      fix,
    });
  }
  const kept = new Set(Object.values(state));
  return new Set(given.map((name) => {
    const input = graph.inputs.find((i) => i.name === name);
    if (!input) {
      throw new KilnError(`donate names ${JSON.stringify(name)}: not an input of the graph`, {
        code: "bad-input",
        fix,
      });
    }
    if (kept.has(name)) {
      throw new KilnError(`donate names "${name}", which a state binding refreshes`, {
        code: "bad-input",
        fix: "leave state inputs out of donate: the executable owns their data already",
      });
    }
    return input.value;
  }));
}

/**
 * `kernels` with each output that may be stored over a donated input marked (see the module's
 * description): `donated` are graph input values whose data a run may overwrite, `outputs` the
 * graph's output values.
 */
export function inPlaceKernels(
  kernels: readonly KernelIR[],
  donated: ReadonlySet<number>,
  outputs: ReadonlySet<number>,
): KernelIR[] {
  if (donated.size === 0) return [...kernels];
  const lastReader = new Map<number, number>();
  kernels.forEach((k, n) => k.inputs.forEach((b) => lastReader.set(b.value, n)));
  const taken = new Set<number>();
  return kernels.map((k, n) => {
    const pairs: { output: number; input: number }[] = [];
    if (k.group !== undefined) return k;
    k.outputs.forEach((o, output) => {
      if (!outputs.has(o.value) || taken.has(o.value)) return;
      const input = k.inputs.findIndex((b) =>
        donated.has(b.value) && !outputs.has(b.value) && !taken.has(b.value) &&
        lastReader.get(b.value) === n
      );
      if (input < 0 || !storesOver(k, output, input)) return;
      taken.add(o.value).add(k.inputs[input].value);
      pairs.push({ output, input });
    });
    return pairs.length ? { ...k, inPlace: pairs } : k;
  });
}

/**
 * Whether output `output` of `k` may share input `input`'s buffer: an elementwise kernel storing
 * it point for point over the space, the input of the same type, read only by that output's
 * expression and only at that point.
 */
function storesOver(k: KernelIR, output: number, input: number): boolean {
  const o = k.outputs[output], b = k.inputs[input];
  if (k.opaque || k.blockProduct || k.blockUnpack || k.reductions.length || k.reduced.length) {
    return false;
  }
  if (o.dtype !== b.dtype || o.packed || b.packed || o.combine || o.level !== "full") {
    return false;
  }
  if (!sameShape(o.shape, k.space) || !sameShape(b.shape, k.space) || o.steps.length) return false;
  let pointwise = true, read = false;
  k.outputs.forEach((x, i) =>
    walk(x.expr, (e) => {
      if (e.kind !== "load" || e.input !== input) return;
      read = true;
      pointwise &&= i === output && e.steps.length === 0;
    })
  );
  return read && pointwise;
}

/** What {@linkcode keptForm} finds: the condition, the other branch, the input's index. */
export interface KeptForm {
  readonly c: Expr;
  readonly y: Expr;
  readonly input: number;
}

/**
 * Output `k`'s `Where(c, input, y)` form, where it is stored over that input (`c` true keeps the
 * input's value where it lies, so a generator stores `y` only where `c` fails); `undefined` for
 * any other output.
 */
export function keptForm(kernel: KernelIR, k: number): KeptForm | undefined {
  const pair = kernel.inPlace?.find((p) => p.output === k);
  const e = kernel.outputs[k].expr;
  if (!pair || e.kind !== "alu" || e.op !== "Where") return undefined;
  const [c, x, y] = e.args;
  const plain = x.kind === "load" && x.input === pair.input && x.steps.length === 0;
  return plain ? { c, y, input: pair.input } : undefined;
}

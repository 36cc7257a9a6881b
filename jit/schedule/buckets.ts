/**
 * Shape buckets: an executable compiled for an upper bound `B` of axis 0 of some inputs runs any
 * extent `e ≤ B` without recompiling, computing and returning only the active rows. That is only
 * exact when rows never mix, so compile time proves it per kernel: iteration axis 0 is the batch
 * axis and is not reduced, and every batch-bearing buffer is read and written only inside the
 * block of its batch row (probed on the index maps' linear offsets); buffers without a batch axis
 * must not depend on it. Kernels that touch no batch data run in full.
 *
 * @module
 */
import { KilnError } from "../support/errors.ts";
import type { Graph } from "../ir/graph.ts";
import {
  applyStep,
  type Expr,
  gathers,
  type IndexStep,
  type KernelIR,
  linearIndex,
  walk,
} from "../ir/kernel_ir.ts";
import { rng } from "../support/random.ts";
import { type Shape, sizeOf } from "../ir/shape.ts";

/** Which kernels and values follow the bucketed batch axis. */
export interface BucketPlan {
  /** The compiled upper bound of axis 0. */
  readonly bound: number;
  /** Names of the bucketed inputs. */
  readonly inputs: readonly string[];
  /** Per kernel: whether it runs only the active rows. */
  readonly partial: readonly boolean[];
  /** Values (graph ids) whose axis 0 follows the batch. */
  readonly batched: ReadonlySet<number>;
}

const fail = (what: string): never => {
  throw new KilnError(`Shape buckets: ${what}`, {
    code: "unsupported",
    fix:
      "compile without buckets for this graph (each shape then compiles once), or keep rows independent",
  });
};

/** Proves that `kernels` keep batch rows independent, or explains why not. */
export function planBuckets(
  graph: Graph,
  kernels: readonly KernelIR[],
  names: readonly string[],
): BucketPlan {
  const inputs = names.map((n) =>
    graph.inputs.find((i) => i.name === n) ?? fail(`no input "${n}"`)
  );
  const bound = inputs[0].shape[0];
  for (const i of inputs) {
    if (!i.shape.length || i.shape[0] !== bound) {
      fail(
        `input "${i.name}" has shape [${i.shape}]; bucketed inputs share axis 0 of size ${bound}`,
      );
    }
  }
  const batched = new Set(inputs.map((i) => i.value));
  const partial = kernels.map((k) => {
    if (!k.inputs.some((b) => batched.has(b.value))) return false;
    if (k.opaque) {
      fail(`${k.name} (${k.opaque.op}) runs as a whole op on batch data`);
    } else {
      if (k.space[0] !== bound || k.reduced.includes(0)) {
        fail(`${k.name} (${k.ops.join(", ")}) mixes batch rows`);
      }
      check(k, batched, bound);
    }
    for (const o of k.outputs) {
      if (sizeOf(o.shape) % bound !== 0) {
        fail(`${k.name} writes [${o.shape}], not divisible into ${bound} rows`);
      }
      batched.add(o.value);
    }
    return true;
  });
  for (const o of graph.outputs) {
    if (batched.has(o.value) && graph.values[o.value].shape[0] % bound !== 0) {
      fail(`output "${o.name}" does not keep the batch on axis 0`);
    }
  }
  return { bound, inputs: names, partial, batched };
}

function check(k: KernelIR, batched: ReadonlySet<number>, bound: number): void {
  const next = rng(k.space.reduce((a, b) => a * 31 + b, 7));
  const probes = [...Array(48)].map(() => k.space.map((d) => Math.floor(next() * d)));
  const offset = (steps: readonly IndexStep[], shape: Shape, c: number[]) => {
    let x: number[] | undefined = c;
    for (const s of steps) if (x) x = applyStep(s, x);
    return x ? linearIndex(x, shape) : undefined;
  };
  const verify = (steps: readonly IndexStep[], shape: Shape, isBatch: boolean, what: string) => {
    const block = sizeOf(shape) / bound;
    for (const c of probes) {
      const off = offset(steps, shape, c);
      if (off === undefined) continue;
      const ok = isBatch
        ? Math.floor(off / block) === c[0]
        : off === offset(steps, shape, [0, ...c.slice(1)]);
      if (!ok) fail(`${k.name} (${k.ops.join(", ")}) reads or writes ${what} across batch rows`);
    }
  };
  const loads = (e: Expr) =>
    walk(e, (x) => {
      if (x.kind !== "load") return;
      const isBatch = batched.has(k.inputs[x.input].value);
      // A gathered load can reach any row of its buffer.
      if (gathers(x.steps)) {
        if (isBatch) fail(`${k.name} (${k.ops.join(", ")}) gathers from a batched input`);
      } else verify(x.steps, k.inputs[x.input].shape, isBatch, "an input");
    });
  k.reductions.forEach((r) => loads(r.expr));
  k.outputs.forEach((o) => {
    loads(o.expr);
    verify(o.steps, o.shape, true, "an output");
  });
}

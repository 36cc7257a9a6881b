/**
 * A program's modules instantiated over its arena: one instance per module, each kernel's entry
 * bound to its buffers' addresses, and the same addresses in shared memory for the workers.
 *
 * @module
 */
import type { ArenaLayout, LayoutPlan } from "./arena_layout.ts";

/** What the modules are instantiated from: the kernels, their modules and the host functions. */
export interface InstancePlan extends Pick<LayoutPlan, "modules" | "kernels"> {
  /** Host functions the modules import (`env.*`). */
  readonly imports: Readonly<Record<string, (...args: number[]) => number>>;
}

/** The instantiated modules of a program: each kernel's entry, bound to its buffers. */
export interface Instances {
  /** Each kernel's `run` export, its buffers' addresses, and `run` with them bound. */
  readonly runs: ((...a: number[]) => void)[];
  readonly addresses: number[][];
  readonly bound: ((...a: number[]) => void)[];
  /** Per kernel, the panels a matmul of few rows ranges over instead of rows (0: rows). */
  readonly panels: number[];
  /** Per kernel, the place of its B's panels its calls take (negated: they pack them). */
  readonly packs: number[];
  /** Every kernel's addresses in shared memory, kernel `i`'s from `tableAt[i]` (workers'). */
  readonly table: Int32Array;
  readonly tableAt: readonly number[];
}

/**
 * One instance per module: kernels of the same code (a repeated block, an RNN's steps) share it,
 * and with it V8's tier-up budget, so their code is optimized as soon as one kernel's would be
 * if it ran as often as they all do.
 */
export function instantiate(
  plan: InstancePlan,
  layout: ArenaLayout,
  memory: WebAssembly.Memory,
): Instances {
  const instances = new Map<WebAssembly.Module, WebAssembly.Exports>();
  const exported = plan.modules.map((mod) => {
    let exports = instances.get(mod);
    if (!exports) {
      exports = new WebAssembly.Instance(mod, { env: { memory, ...plan.imports } }).exports;
      instances.set(mod, exports);
    }
    return exports;
  });
  const runs = exported.map((e) => e.run as (...a: number[]) => void);
  const addresses = plan.kernels.map((k) =>
    [...k.inputs, ...k.outputs].map((b) => layout.offsets.get(b.value)!)
  );
  const bound: ((...a: number[]) => void)[] = [];
  // A matmul of few rows ranges over B's panels instead (see `panelSplit`): its calls cover
  // every row.
  const panels = exported.map((e) => (e.panelSplit as WebAssembly.Global | undefined)?.value ?? 0);
  // A B packed anew each run whose kernel packs its own panels in each call: its place
  // negated says so (see `tiledLoops`), and the program packs nothing ahead.
  const packs = layout.packedAt.map((at, i) => {
    const own = (exported[i].packsInCalls as WebAssembly.Global | undefined)?.value;
    return own && layout.packs[i] && !layout.packs[i]!.fixed ? -at : at;
  });
  // The workers read each kernel's addresses from shared memory, as the places may swap.
  const tableAt = [0];
  for (const a of addresses) tableAt.push(tableAt.at(-1)! + a.length);
  const table = new Int32Array(new SharedArrayBuffer(4 * Math.max(1, tableAt.at(-1)!)));
  addresses.forEach((a, i) => table.set(a, tableAt[i]));
  const k = { runs, addresses, bound, panels, packs, table, tableAt };
  runs.forEach((_, i) => bindCall(k, i, layout.scratch));
  return k;
}

/**
 * Kernel `i`'s call with its buffers and the scratch bound, leaving its rows (and B's panels): a
 * run of a small model is mostly calls (lstm2: 47 kernels in 0.13 ms), so nothing is spread or
 * counted per call. Bound anew when the kernel's code or its buffers' places change.
 */
export function bindCall(
  k: Pick<Instances, "runs" | "addresses" | "bound">,
  i: number,
  scratch: number,
): void {
  k.bound[i] = k.runs[i].bind(null, ...k.addresses[i], scratch);
}

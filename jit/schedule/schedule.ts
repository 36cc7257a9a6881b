/**
 * Scheduling: which backend runs each fused kernel. Candidates are the backends that can run a
 * kernel (any kernel-IR backend for fused kernels; for an opaque op, those that support it). The
 * policy narrows or orders them; for the cost-driven policies a dynamic program over the kernels
 * in execution order (state: the previous kernel's backend) minimizes compute + dispatch + sync +
 * transfer time, so neighbouring kernels stay together instead of ping-ponging. A backend that
 * estimates its own cost (`Backend.estimateCost`) is costed by that instead of its rates. Every
 * buffer that crosses memory spaces becomes an explicit transfer in the plan.
 *
 * @module
 */
import type { Backend, Workload } from "../runtime/backend.ts";
import type { Graph } from "../ir/graph.ts";
import { byteSize } from "../ir/dtype.ts";
import { KilnError } from "../support/errors.ts";
import { type KernelIR, usesF64 } from "../ir/kernel_ir.ts";
import type { BackendRates } from "./cost_model.ts";
import { sizeOf } from "../ir/shape.ts";

/** How kernels are placed. */
export type Policy =
  | { readonly kind: "auto" }
  | { readonly kind: "min-cost" }
  | { readonly kind: "local-first" }
  | { readonly kind: "prefer"; readonly backendKind: string }
  | { readonly kind: "named"; readonly backend: string };

/** A buffer moved between memory spaces. */
export interface Transfer {
  /** Graph value id. */
  readonly value: number;
  /** Backend that wrote it (or `host` for inputs). */
  readonly from: string;
  /** Backend that reads it (or `host` for outputs). */
  readonly to: string;
  /** Bytes moved. */
  readonly bytes: number;
}

/** The placement of every kernel. */
export interface Schedule {
  /** Backend id per kernel (same order as the kernels). */
  readonly placement: readonly string[];
  /** Estimated milliseconds per kernel on its backend (compute + dispatch). */
  readonly kernelMs: readonly number[];
  /** Buffers crossing memory spaces. */
  readonly transfers: readonly Transfer[];
  /** Estimated milliseconds of the whole run. */
  readonly totalMs: number;
  /** Why the placement is what it is. */
  readonly reason: string;
}

/** Inputs to {@linkcode schedule}. */
export interface ScheduleRequest {
  /** Kernels in execution order. */
  readonly kernels: readonly KernelIR[];
  /** Backends that may run them. */
  readonly backends: readonly Backend[];
  /** Placement policy. */
  readonly policy: Policy;
  /** Graph values the caller provides (inputs, params, constants): they start on the host. */
  readonly hostValues: ReadonlySet<number>;
  /** Graph values read back to the host. */
  readonly outputs: ReadonlySet<number>;
  /**
   * Graph inputs that lie on a backend's device when runs start (value → backend id), for the
   * local-first policy; the rest start on the host.
   */
  readonly inputsOn?: ReadonlyMap<number, string>;
  /** Per backend (same order as `backends`), the rates its costs are estimated with. */
  readonly rates: readonly BackendRates[];
  /**
   * The graph the kernels come from, handed to a backend's own
   * {@linkcode Backend.estimateCost} (without it, only the rates are used).
   */
  readonly graph?: Graph;
}

/** Rates used when a policy places without calibration: estimates come out as NaN. */
export const UNKNOWN_RATES: BackendRates = {
  bytesPerMs: NaN,
  flopsPerMs: NaN,
  dispatchMs: NaN,
  syncMs: NaN,
  transferBytesPerMs: NaN,
};

/** Memory space of a backend: GPUs have their own, everything else shares the host's. */
export function memorySpace(b: Backend): string {
  return b.kind === "gpu" ? b.id : "host";
}

/**
 * Why `k` does not fit `b`'s memory: a buffer larger than the device's biggest storage binding
 * (counted in the 32-bit words generated kernels store every dtype in), other than the values
 * `b` elides (see {@linkcode elidedBy}). `undefined` if it fits.
 */
export function unfit(
  b: Backend,
  k: KernelIR,
  elided: ReadonlySet<number> = NONE,
): string | undefined {
  const limit = b.capabilities().maxStorageBufferBytes;
  if (limit <= 0) return undefined;
  const big = [...k.inputs, ...k.outputs].find((buf) =>
    sizeOf(buf.shape) * 4 > limit && !elided.has(buf.value)
  );
  return big &&
    `${k.name} holds a ${big.dtype}[${big.shape}] tensor of ${
      sizeOf(big.shape) * 4
    } bytes, more than ${b.id}'s largest binding (${limit} bytes)`;
}

const NONE: ReadonlySet<number> = new Set();

/**
 * The values of `kernels` that `b` never stores when it runs every kernel touching them
 * (`Backend.elided`; `outputs` are needed past the kernels).
 */
export function elidedBy(
  b: Backend,
  kernels: readonly KernelIR[],
  outputs: ReadonlySet<number>,
): ReadonlySet<number> {
  return b.deviceLost ? NONE : b.elided?.(kernels, outputs) ?? NONE;
}

/**
 * `placement` (backend indices per kernel) with every kernel that touches a value `elided[b]`
 * names on backend `b` once any of them is there: split across backends, the value would have
 * to be stored, and the elision was what let it past `b`'s binding limit.
 */
export function keepElidedTogether(
  kernels: readonly KernelIR[],
  placement: readonly number[],
  elided: readonly ReadonlySet<number>[],
): number[] {
  const placed = [...placement];
  const touches = (k: KernelIR, v: number) =>
    k.inputs.some((x) => x.value === v) || k.outputs.some((x) => x.value === v);
  // Each pass moves kernels onto a backend and never off one that elides what they touch.
  for (let changed = true; changed;) {
    changed = false;
    elided.forEach((values, b) => {
      for (const v of values) {
        const group = kernels.flatMap((k, i) => (touches(k, v) ? [i] : []));
        if (!group.some((i) => placed[i] === b)) continue;
        for (const i of group) if (placed[i] !== b) (placed[i] = b, changed = true);
      }
    });
  }
  return placed;
}

/**
 * The error for `kernels` that do not fit `b` (see {@linkcode unfit}; `elided` as there), if
 * any.
 */
export function oversized(
  b: Backend,
  kernels: readonly KernelIR[],
  elided: ReadonlySet<number> = NONE,
): KilnError | undefined {
  const reasons = kernels.flatMap((k) => unfit(b, k, elided) ?? []);
  if (!reasons.length) return undefined;
  return new KilnError(`Tensors too large for ${b.id}: ${reasons.join("; ")}`, {
    code: "unsupported",
    fix:
      "split the work along a batch axis into parts under the limit, or compile with the auto policy (it runs such kernels on the CPU)",
  });
}

/**
 * Whether `b` can run `k` under a cost-driven or kind policy, given the values `b` elides among
 * `k`'s kernels (see {@linkcode elidedBy}).
 */
export function canRun(b: Backend, k: KernelIR, elided: ReadonlySet<number> = NONE): boolean {
  if (b.deviceLost || !b.codegen || unfit(b, k, elided)) return false;
  if (!b.capabilities().f64 && usesF64(k)) return false;
  // A placement copy runs where its op says the data must live: ToDevice in a device's own
  // memory, ToHost in the host's.
  if (k.placement) return (memorySpace(b) === "host") === (k.placement === "ToHost");
  if (!k.opaque) return true;
  return b.supports({
    op: k.opaque.op,
    attrs: k.opaque.attrs,
    inputs: k.inputs,
    outputs: k.outputs,
    label: k.name,
  });
}

const bytesOf = (b: { shape: readonly number[]; dtype: Parameters<typeof byteSize>[0] }) =>
  sizeOf(b.shape) * byteSize(b.dtype);

/** The {@linkcode Workload} of one kernel: what it reads and writes, and its operations. */
export function kernelWork(k: KernelIR): Workload {
  const bytes = [...k.inputs, ...k.outputs].reduce((s, b) => s + bytesOf(b), 0);
  const flops = sizeOf(k.space) * Math.max(1, k.reductions.length + k.outputs.length);
  return { flops, bytes, hostBytes: bytes };
}

/** Milliseconds `work` streams or computes at `rates`, whichever bounds it (no dispatch, no sync). */
export function workMs(work: Workload, rates: BackendRates): number {
  return Math.max(work.bytes / rates.bytesPerMs, work.flops / rates.flopsPerMs);
}

/**
 * Estimated milliseconds of `k` on a backend with `rates` (excluding transfers into it and sync),
 * or the backend's own estimate when it makes one and `graph` is known.
 */
export function kernelCost(
  k: KernelIR,
  rates: BackendRates,
  own?: { backend: Backend; graph: Graph },
): number {
  const work = kernelWork(k);
  const estimate = own?.backend.estimateCost?.(own.graph, work);
  if (estimate) return estimate.compute + estimate.transfer;
  return rates.dispatchMs + workMs(work, rates);
}

/** Whether `b` may run `k` under `policy` (naming a backend runs placement copies there too). */
function runsUnder(
  policy: Policy,
  b: Backend,
  k: KernelIR,
  elided: ReadonlySet<number> = NONE,
): boolean {
  return policy.kind === "named" && k.placement
    ? !b.deviceLost && b.codegen !== undefined
    : canRun(b, k, elided);
}

/**
 * The backends {@linkcode schedule} should weigh for `kernels` under `policy`, most preferred
 * first: those that can run some kernel (the named one alone, always, under `named`), software
 * devices (an emulated GPU: exact but slow) and then interpreters (the reference backend) only
 * when naming them or when nothing else runs some kernel, and the preferred kind first under
 * `prefer`. Capabilities are read as they are, so callers prepare the backends first. `outputs`
 * are the values needed past the kernels.
 */
export function usableBackends(
  kernels: readonly KernelIR[],
  backends: readonly Backend[],
  policy: Policy,
  outputs: ReadonlySet<number> = NONE,
  holding: ReadonlySet<string> = new Set(),
): Backend[] {
  // The named backend stays even where it runs nothing: the error then says why.
  if (policy.kind === "named") return backends.filter((b) => b.id === policy.backend);
  const elided = new Map(backends.map((b) => [b, elidedBy(b, kernels, outputs)]));
  const runs = (b: Backend, k: KernelIR) => runsUnder(policy, b, k, elided.get(b));
  let usable = backends.filter((b) => kernels.some((k) => runs(b, k)));
  // Software devices, then interpreters, only where the others leave some kernel unrun.
  const unless = (slow: (b: Backend) => boolean | undefined) => {
    const rest = usable.filter((b) => !slow(b));
    if (kernels.every((k) => rest.some((b) => runs(b, k)))) usable = rest;
  };
  // A device that holds inputs stays, software or not: the work goes to the data there.
  unless((b) => b.capabilities().software && !holding.has(b.id));
  unless((b) => b.capabilities().interpreter);
  if (policy.kind === "prefer") {
    const preferred = usable.filter((b) => b.kind === policy.backendKind);
    usable = [...preferred, ...usable.filter((b) => b.kind !== policy.backendKind)];
  }
  return usable;
}

/**
 * Places every kernel under `policy`: a pure function of the kernels, the backends (as
 * {@linkcode usableBackends} narrows them) and their rates.
 */
export function schedule(req: ScheduleRequest): Schedule {
  const { kernels, policy, backends } = req;
  if (kernels.length === 0) {
    return {
      placement: [],
      kernelMs: [],
      transfers: [],
      totalMs: 0,
      reason: "no kernels: the outputs are inputs",
    };
  }
  const plan = new Costing(req);
  const stuck = kernels.filter((k) => !backends.some((_, b) => plan.runs(b, k)));
  const named = policy.kind === "named" && req.backends.find((b) => b.id === policy.backend);
  const tooLarge = named && oversized(named, stuck, plan.elided[backends.indexOf(named)]);
  if (tooLarge) throw tooLarge;
  if (stuck.length) {
    throw new KilnError(
      `No ${
        policy.kind === "named" ? `backend "${policy.backend}"` : "available backend"
      } can run ${stuck.map((k) => `${k.name} (${k.ops.join(", ")})`).join("; ")}`,
      {
        code: "unsupported",
        fix: "use another policy or backend, or register kernels for these ops",
      },
    );
  }
  if (policy.kind === "named" || policy.kind === "prefer") {
    const placement = kernels.map((k) => backends.findIndex((_, b) => plan.runs(b, k)));
    const reason = policy.kind === "named"
      ? `named: every kernel on "${policy.backend}"`
      : `prefer ${policy.backendKind}: first capable backend of that kind`;
    return plan.summarize(placement, reason);
  }
  if (policy.kind === "local-first") {
    return plan.summarize(
      plan.localFirst(),
      "local-first: each kernel stays where its inputs live",
    );
  }
  return plan.summarize(
    plan.leastTime(),
    `${policy.kind}: least estimated time (compute + dispatch + transfers + sync)`,
  );
}

/** The costs of placing a request's kernels: compute, copies between memory spaces, syncs. */
class Costing {
  readonly #req: ScheduleRequest;
  /** Per backend, the values it elides among the kernels (see {@linkcode elidedBy}). */
  readonly elided: ReadonlySet<number>[];
  /** The kernel that produces each value (absent: an input, a param or a constant). */
  readonly #producer = new Map<number, number>();

  constructor(req: ScheduleRequest) {
    this.#req = req;
    this.elided = req.backends.map((b) => elidedBy(b, req.kernels, req.outputs));
    req.kernels.forEach((k, i) => k.outputs.forEach((o) => this.#producer.set(o.value, i)));
  }

  /** Whether backend `b` may run kernel `k` under the policy. */
  runs(b: number, k: KernelIR): boolean {
    const { policy, backends } = this.#req;
    return runsUnder(policy, backends[b], k, this.elided[b]);
  }

  /** Milliseconds of kernel `k` on backend `b`: the backend's own estimate, else its rates. */
  costOf(k: KernelIR, b: number): number {
    const { rates, graph, backends } = this.#req;
    return kernelCost(k, rates[b], graph && { backend: backends[b], graph });
  }

  /**
   * Whether kernel `i` on backend `b` must receive `value`: not when it was produced in that
   * memory space, nor when an earlier kernel there already received it (the copy is mirrored).
   */
  needsCopy(value: number, i: number, b: number, placedAt: (j: number) => number): boolean {
    const { backends, kernels } = this.#req;
    const j = this.#producer.get(value);
    const space = memorySpace(backends[b]);
    if ((j === undefined ? "host" : memorySpace(backends[placedAt(j)])) === space) return false;
    for (let e = 0; e < i; e++) {
      if (
        memorySpace(backends[placedAt(e)]) === space &&
        kernels[e].inputs.some((x) => x.value === value)
      ) return false;
    }
    return true;
  }

  /**
   * Transfer milliseconds into kernel `i` on backend `b`, given where its producers ran. A copy
   * from a device to the host waits for that device (a readback: Deno's GPU takes about 11 ms
   * however little it did), so it costs the device's sync as well as its bytes: counted only at
   * the run's end, a plan crossing back and forth looked cheap, and DenseNet-121's auto trial
   * timed one at 2.7 s a run against 44 ms on wasm.
   */
  inbound(i: number, b: number, placedAt: (j: number) => number): number {
    const { kernels, rates, backends } = this.#req;
    return kernels[i].inputs.reduce((ms, buf) => {
      const j = this.#producer.get(buf.value);
      if (!this.needsCopy(buf.value, i, b, placedAt)) return ms;
      const from = j === undefined ? undefined : rates[placedAt(j)];
      const wait = from && memorySpace(backends[b]) === "host" ? from.syncMs : 0;
      return ms + wait +
        bytesOf(buf) / Math.min(rates[b].transferBytesPerMs, from?.transferBytesPerMs ?? Infinity);
    }, 0);
  }

  /**
   * Keep data where it lives: each kernel in the memory space its inputs were produced in (for
   * graph inputs, the device they lie on, else the host's), on the fastest backend there — the least estimated time where rates
   * are known, else SIMD before plain. Backends sharing the host's memory are one place: after a
   * kernel only the reference interpreter runs, the next goes back to wasm, no copy between.
   */
  localFirst(): number[] {
    const { kernels, backends, inputsOn } = this.#req;
    const placement: number[] = [];
    const spaceOf = (id: string) => backends.find((b) => b.id === id);
    kernels.forEach((k) => {
      const homes = new Set(k.inputs.flatMap((buf) => {
        const j = this.#producer.get(buf.value);
        if (j !== undefined) return [memorySpace(backends[placement[j]])];
        const on = spaceOf(inputsOn?.get(buf.value) ?? "");
        return on ? [memorySpace(on)] : [];
      }));
      if (homes.size === 0) homes.add("host");
      const candidates = backends.map((_, b) => b).filter((b) => this.runs(b, k));
      const fastest = (list: number[]) =>
        list.sort((a, b) =>
          this.costOf(k, a) - this.costOf(k, b) ||
          Number(backends[a].kind !== "cpu-simd") - Number(backends[b].kind !== "cpu-simd")
        )[0];
      const local = candidates.filter((b) => homes.has(memorySpace(backends[b])));
      const host = candidates.filter((b) => memorySpace(backends[b]) === "host");
      placement.push(fastest(local) ?? fastest(host) ?? candidates[0]);
    });
    return placement;
  }

  /**
   * The placement of least estimated time, by dynamic programming: best[b] = (cost, placement)
   * of the prefix with the last kernel on backend b. Transfers use each path's own placement, so
   * the choice accounts for where producers ran.
   */
  leastTime(): number[] {
    const { kernels, backends } = this.#req;
    let paths = backends.map(() => ({ cost: 0, placed: [] as number[] }));
    kernels.forEach((k, i) => {
      paths = backends.map((_, b) => {
        if (!this.runs(b, k)) return { cost: Infinity, placed: [] };
        let best = { cost: Infinity, placed: [] as number[] };
        for (const p of i === 0 ? [paths[0]] : paths) {
          if (p.cost === Infinity) continue;
          const cost = p.cost + this.costOf(k, b) + this.inbound(i, b, (j) => p.placed[j]);
          if (cost < best.cost) best = { cost, placed: [...p.placed, b] };
        }
        return best;
      });
    });
    const total = (p: { cost: number; placed: number[] }) => p.cost + this.finalCost(p.placed);
    return paths.filter((p) => p.cost < Infinity).reduce((a, b) => (total(b) < total(a) ? b : a))
      .placed;
  }

  /** A run's end: each backend used synchronizes once, and device outputs come back. */
  finalCost(placed: number[]): number {
    const { kernels, rates, backends, outputs } = this.#req;
    const used = new Set(placed);
    const sync = [...used].reduce((s, b) => s + rates[b].syncMs, 0);
    const out = [...outputs].reduce((s, v) => {
      const j = this.#producer.get(v);
      if (j === undefined) return s;
      const b = placed[j];
      const buf = kernels[j].outputs.find((o) => o.value === v)!;
      return memorySpace(backends[b]) === "host"
        ? s
        : s + bytesOf(buf) / rates[b].transferBytesPerMs;
    }, 0);
    return sync + out;
  }

  /** The schedule of `placement` (elided values kept with their kernels), for `why`. */
  summarize(placement: number[], why: string): Schedule {
    const { kernels, backends, outputs } = this.#req;
    const placed = keepElidedTogether(kernels, placement, this.elided);
    const transfers: Transfer[] = [];
    kernels.forEach((k, i) => {
      for (const buf of k.inputs) {
        const j = this.#producer.get(buf.value);
        const from = j === undefined ? "host" : backends[placed[j]].id;
        if (this.needsCopy(buf.value, i, placed[i], (x) => placed[x])) {
          transfers.push({
            value: buf.value,
            from,
            to: backends[placed[i]].id,
            bytes: bytesOf(buf),
          });
        }
      }
    });
    for (const v of outputs) {
      const j = this.#producer.get(v);
      if (j !== undefined && memorySpace(backends[placed[j]]) !== "host") {
        transfers.push({
          value: v,
          from: backends[placed[j]].id,
          to: "host",
          bytes: bytesOf(kernels[j].outputs.find((o) => o.value === v)!),
        });
      }
    }
    const kernelMs = kernels.map((k, i) => this.costOf(k, placed[i]));
    const totalMs = kernelMs.reduce((a, b) => a + b, 0) +
      kernels.reduce((s, _, i) => s + this.inbound(i, placed[i], (j) => placed[j]), 0) +
      this.finalCost(placed);
    return {
      placement: placed.map((b) => backends[b].id),
      kernelMs,
      transfers,
      totalMs,
      reason: why,
    };
  }
}

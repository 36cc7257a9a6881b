/**
 * Where everything of an arena program lives: each buffer's byte offset in its one
 * `WebAssembly.Memory` (intermediates sharing places as the memory plan says), the threads'
 * scratch, the tiled matmuls' packed panels, and the size, refused past what wasm addresses.
 *
 * @module
 */
import type { DType } from "../../jit/ir/dtype.ts";
import type { HostTensor } from "../../jit/ir/host_tensor.ts";
import { type Expr, type KernelIR, rowCount, walk } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { planMemory } from "../../jit/schedule/memory_plan.ts";
import { KilnError } from "../../jit/support/errors.ts";
import { packedInput, packsOf, scratchBytes } from "../../shaders/wasm/matmul_plan.ts";
import { elementBytes, type Storage } from "../words.ts";
import { zeroHoldings } from "./held_zeros.ts";
import { type Chain, chainsOf, threadable } from "./splits.ts";
import type { WorkerThreads } from "./worker_crew.ts";

/** The arena stores every dtype in 32-bit words, f64 in 64-bit ones (see `words.ts`). */
export const WORDS: Storage = { half: false };

/**
 * Bytes at the arena's start where a kernel records a fault it cannot return: word 0 is set to 1,
 * words 1 and 2 hold a gather's offending index and the extent it had to fit. A run checks it
 * after its kernels and throws.
 */
export const FAULT_BYTES = 16;

/** Bytes of a WebAssembly memory page. */
export const PAGE = 65536;
/** 4 GiB: what a 32-bit WebAssembly memory can address. */
export const MAX_PAGES = 65536;

/** What a layout is made from (the part of an `ArenaPlan` it reads). */
export interface LayoutPlan {
  /** Values bound from the run's arguments, in argument order; `resident` ones are params. */
  readonly bindings: readonly { readonly value: number; readonly resident: boolean }[];
  /** The value of each output index `run` may be asked for. */
  readonly outputs: readonly number[];
  /**
   * Kernels in execution order; opaque ones are custom ops whose registered module's `run` takes
   * their buffers' addresses alone.
   */
  readonly kernels: readonly KernelIR[];
  /** One compiled module per kernel. */
  readonly modules: readonly WebAssembly.Module[];
  /** Constant buffers (value id → data). */
  readonly constants: ReadonlyMap<number, HostTensor>;
  /** Threads for large kernels (modules must import a shared memory when > 1). */
  readonly threads?: number;
  /** The worker threads (Deno's, `node:worker_threads` or a page's), when there are any. */
  readonly workers?: WorkerThreads;
}

/** Where everything of a program lives in its arena, and how large the arena is. */
export interface ArenaLayout {
  /** Groups of kernels split as one job (see `Chain`). */
  readonly chains: readonly Chain[];
  /** Every kernel buffer's type, by value. */
  readonly types: Map<number, { shape: readonly number[]; dtype: DType }>;
  /** Every value's byte offset. */
  readonly offsets: Map<number, number>;
  /** Per kernel, whether it is worth splitting over threads; the threads the program uses. */
  readonly threaded: boolean[];
  readonly threads: number;
  /** The scratch (one slice of `scratchSize` a thread) after the values. */
  readonly scratch: number;
  readonly scratchSize: number;
  /**
   * Constants and params read only as a tiled product's B to pack (a model's weights): they take
   * turns at one place, each packed before the next is written there.
   */
  readonly sources: ReadonlySet<number>;
  /** Per tiled matmul, where its B's packed panels go (fixed B: packed once per change). */
  readonly packs: (Pack | undefined)[];
  readonly packedAt: number[];
  /** The arena's size in pages. */
  readonly pages: number;
  /** The byte after the program's last place. */
  readonly end: number;
  /**
   * The fixed values (params, constants) at places of their own, by value → their bytes: those
   * another program holding the same data may share (`arena_share.ts`).
   */
  readonly fixedBytes: ReadonlyMap<number, number>;
  /**
   * Outputs stored over a run's argument (`KernelIR.inPlace`), by value → the argument's value:
   * one place for both, which no swap moves apart.
   */
  readonly inPlace: ReadonlyMap<number, number>;
  /** Values held a byte an element (block products' zero points: `held_zeros.ts`). */
  readonly held: ReadonlySet<number>;
}

/** Where a tiled matmul's B is packed, and how. */
export interface Pack {
  readonly value: number;
  readonly fixed: boolean;
  readonly bytes: number;
  readonly tableRows?: number;
  at: number;
}

/**
 * Where a layout starts, and the fixed values placed already (`arena_share.ts`: another program
 * holds the same data there): value → byte offset.
 */
export interface LayoutBase {
  /** The first byte of the program's own places (default: after the fault record). */
  readonly base: number;
  /** Fixed values at places outside the program's own, by value. */
  readonly shared: ReadonlyMap<number, number>;
}

/** The arena of `plan`: its values, scratch and packed panels placed; too large, refused. */
export function arenaLayout(
  plan: LayoutPlan,
  from: LayoutBase = { base: FAULT_BYTES, shared: new Map() },
): ArenaLayout {
  const types = new Map<number, { shape: readonly number[]; dtype: DType }>();
  for (const k of plan.kernels) for (const b of [...k.inputs, ...k.outputs]) types.set(b.value, b);
  // Intermediates share places as the compiler's memory plan says (lifetimes that do not
  // overlap); inputs, params, constants and outputs keep places of their own.
  const external = new Set([
    ...plan.bindings.map((b) => b.value),
    ...plan.constants.keys(),
    ...plan.outputs,
  ]);
  // A chain's members run together, share by share: what one reads stays until the last.
  const chains = chainsOf(plan.kernels, plan.kernels.map(rowCount), (i) => !plan.kernels[i].opaque);
  const until = plan.kernels.map((_, i) => i);
  for (const c of chains) for (const m of c.kernels) until[m] = c.kernels.at(-1)!;
  const memoryPlan = planMemory(plan.kernels, external, until);
  const { held } = zeroHoldings(plan.kernels);
  const bytes = (v: number) => {
    const { shape, dtype } = types.get(v)!, n = Math.max(1, sizeOf(shape));
    // A table of bytes is read four at a time (`zeroQuad`), the last four from its last byte.
    const stored = held.has(v) ? n + 4 : n * elementBytes(dtype, WORDS);
    return Math.ceil(stored / 16) * 16;
  };
  // Values the program holds fixed (params, constants): written only when their data changes.
  const fixed = new Set([
    ...plan.bindings.filter((b) => b.resident).map((b) => b.value),
    ...plan.constants.keys(),
  ]);
  const declared = new Map(plan.modules.map((m) => [m, packsOf(m)]));
  const sources = packedSources(plan, declared, fixed);
  const slotBytes = memoryPlan.slots.map(() => 0);
  for (const [v, s] of memoryPlan.assignment) slotBytes[s] = Math.max(slotBytes[s], bytes(v));
  const offsets = new Map<number, number>(from.shared);
  const fixedBytes = new Map<number, number>();
  // The arena's first words are the fault record kernels write (see `FAULT_BYTES`).
  let top = from.base;
  const slotAt = slotBytes.map((b) => (top += b) - b);
  const inPlace = storedOver(plan);
  for (const v of types.keys()) {
    const slot = memoryPlan.assignment.get(v);
    if (slot !== undefined) offsets.set(v, slotAt[slot]);
    else if (!sources.has(v) && !inPlace.has(v) && !from.shared.has(v)) {
      if (fixed.has(v)) fixedBytes.set(v, bytes(v));
      offsets.set(v, top);
      top += bytes(v);
    }
  }
  for (const [output, input] of inPlace) offsets.set(output, offsets.get(input)!);
  // The sources' one place, as large as the largest (BERT-base's f32 weights had held 340 MB of
  // the arena twice, as written and as packed, and paid first touches of both in the first run).
  for (const v of sources) offsets.set(v, top);
  top += Math.max(0, ...[...sources].map(bytes));
  // Decided once per kernel: run() consults it on every call.
  const threaded = plan.kernels.map(threadable);
  const threads = plan.workers && threaded.some(Boolean) ? plan.threads ?? 1 : 1;
  const scratch = top,
    scratchSize = Math.ceil(Math.max(16, ...plan.kernels.map(scratchBytes)) / 16) * 16;
  top += scratchSize * threads;
  // A tiled matmul reads B as panels packed ahead of it (see `tiledGemm`): a B the program holds
  // fixed (a param or constant) at a place of its own, packed once per change of B; any other B
  // at one place all such kernels share, packed in every run right before its kernel.
  const packs = plan.kernels.map((k, i) => {
    const { bytes, tableRows } = declared.get(plan.modules[i]) ?? {};
    if (bytes === undefined) return undefined;
    const value = k.inputs[packedInput(k)].value;
    return { value, fixed: fixed.has(value), bytes, tableRows, at: 0 };
  });
  // A group's members (attention's) also pack at places of their own: a thread runs them one
  // after another over its share of rows (see `chainsOf`), their Bs packed together before.
  const shared = (p: Pack, i: number) => !p.fixed && plan.kernels[i].group === undefined;
  packs.forEach((p, i) => p && !shared(p, i) && (top = (p.at = top) + p.bytes));
  const transient = Math.max(0, ...packs.map((p, i) => (p && shared(p, i) ? p.bytes : 0)));
  packs.forEach((p, i) => p && shared(p, i) && (p.at = top));
  top += transient;
  const packedAt = packs.map((p) => p?.at ?? 0);
  const pages = Math.max(1, Math.ceil(top / PAGE));
  if (pages > MAX_PAGES) {
    throw new KilnError(
      `The wasm backend needs ${
        (top / 2 ** 30).toFixed(1)
      } GiB for this program's buffers; WebAssembly addresses at most 4 GiB`,
      {
        code: "unsupported",
        fix: "run it on the webgpu or reference backend, or compile smaller pieces of the graph",
      },
    );
  }
  return {
    chains,
    types,
    offsets,
    threaded,
    threads,
    scratch,
    scratchSize,
    sources,
    packs,
    packedAt,
    pages,
    end: top,
    fixedBytes,
    inPlace,
    held,
  };
}

/**
 * The outputs `plan`'s kernels may store over their inputs (`KernelIR.inPlace`) where the input is
 * a run's argument (not a param, whose data the program keeps) and the output the program's:
 * output value → input value. Kernels store such an output over its input only where the two
 * addresses are one, so a pair left out here is computed out of place.
 */
function storedOver(plan: LayoutPlan): Map<number, number> {
  const args = new Set(plan.bindings.filter((b) => !b.resident).map((b) => b.value));
  const bound = new Set(plan.bindings.map((b) => b.value)), outputs = new Set(plan.outputs);
  const pairs = new Map<number, number>();
  for (const k of plan.kernels) {
    for (const { output, input } of k.inPlace ?? []) {
      const [o, i] = [k.outputs[output].value, k.inputs[input].value];
      if (args.has(i) && outputs.has(o) && !bound.has(o)) pairs.set(o, i);
    }
  }
  return pairs;
}

/**
 * The `fixed` values (constants and params: host data, written when it changes) whose every read
 * is a tiled product's B, packed (`packs` declared by its module): their words matter only while
 * they are packed. Not an output's.
 */
function packedSources(
  plan: LayoutPlan,
  declared: ReadonlyMap<WebAssembly.Module, unknown>,
  fixed: ReadonlySet<number>,
): Set<number> {
  const packedOnly = new Map<number, boolean>();
  plan.kernels.forEach((k, i) => {
    const packed = declared.get(plan.modules[i]) === undefined ? -1 : packedInput(k);
    const loads = loadCounts(k);
    k.inputs.forEach((b, j) => {
      // The product's B is one load; an epilogue's add of the same weight is another.
      const only = j === packed && loads[j] === 1;
      packedOnly.set(b.value, (packedOnly.get(b.value) ?? true) && only);
    });
  });
  const outputs = new Set(plan.outputs);
  return new Set([...fixed].filter((v) => packedOnly.get(v) && !outputs.has(v)));
}

/** How many distinct loads of each input kernel `k`'s expressions hold (a gather's index too). */
function loadCounts(k: KernelIR): number[] {
  const counts = k.inputs.map(() => 0);
  const seen = new Set<Expr>();
  const visit = (e: Expr) => {
    if (e.kind !== "load") return;
    counts[e.input]++;
    for (const step of e.steps) if (step.kind === "gather") walk(step.index, visit, seen);
  };
  for (const r of k.reductions) walk(r.expr, visit, seen);
  for (const o of k.outputs) walk(o.expr, visit, seen);
  return counts;
}

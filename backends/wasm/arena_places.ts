/**
 * Swapping an argument's place with an output's in an arena program: where a run's argument is a
 * device tensor the program itself left at an output's place (a generation's caches, fed back
 * step after step), the two values trade places instead of the tensor being copied to the
 * argument's. Both places are the program's own, of one size, and every kernel takes its buffers'
 * addresses from the same tables (the calling thread's bound calls, the workers' shared table), so
 * trading them is relabelling: the next step's caches then alternate between two places, never
 * copied.
 *
 * @module
 */
import type { DType } from "../../jit/ir/dtype.ts";
import type { KernelIR } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import type { ArgumentPlace } from "./arena_storage.ts";

/** What a swap changes: the program's places and its kernels' address tables. */
export interface SwappablePlaces {
  /** The kernels in order (their buffers' values, inputs then outputs). */
  readonly kernels: readonly KernelIR[];
  /** The bound arguments' values, in argument order; `resident` ones never swap. */
  readonly bindings: readonly { readonly value: number; readonly resident: boolean }[];
  /** The outputs' values (those at places of their own may swap). */
  readonly outputs: readonly number[];
  /** Each value's type. */
  readonly types: ReadonlyMap<number, { shape: readonly number[]; dtype: DType }>;
  /** Each value's byte offset (changed by a swap). */
  readonly offsets: Map<number, number>;
  /** Each argument's place (changed by a swap). */
  readonly places: (ArgumentPlace | undefined)[];
  /** Each kernel's buffer addresses (changed by a swap). */
  readonly addresses: number[][];
  /** The same in shared memory for the workers, kernel `i`'s from `tableAt[i]`. */
  readonly table: Int32Array;
  readonly tableAt: readonly number[];
  /** Called with each kernel whose addresses changed (to bind its calls anew). */
  readonly rebind: (kernel: number) => void;
  /** Outputs at their argument's place (stored over it), which never swap. */
  readonly inPlace?: ReadonlyMap<number, number>;
}

/** Swaps arguments' places with outputs' (see the module's description). */
export class PlaceSwaps {
  readonly #p: SwappablePlaces;
  /** Where each value is a kernel's buffer: [kernel, position among its buffers]. */
  readonly #users = new Map<number, [number, number][]>();
  /** Outputs at places of their own (not arguments), by value. */
  readonly #outputs: Set<number>;
  /** Kernels whose addresses changed since the last {@linkcode PlaceSwaps.settle}. */
  readonly #moved = new Set<number>();

  /** The swaps of the program `p` describes. */
  constructor(p: SwappablePlaces) {
    this.#p = p;
    p.kernels.forEach((k, n) =>
      [...k.inputs, ...k.outputs].forEach((buffer, j) => {
        const list = this.#users.get(buffer.value);
        if (list) list.push([n, j]);
        else this.#users.set(buffer.value, [[n, j]]);
      })
    );
    const bound = new Set(p.bindings.map((b) => b.value));
    this.#outputs = new Set(
      p.outputs.filter((o) => !bound.has(o) && p.types.has(o) && !p.inPlace?.has(o)),
    );
  }

  /**
   * Swaps argument `i`'s place with the output's at byte `at`, where one of the same type lives
   * there and the argument is no param; returns whether it did.
   */
  swap(i: number, at: number): boolean {
    const p = this.#p, b = p.bindings[i], place = p.places[i];
    if (!place || b.resident) return false;
    let output: number | undefined;
    for (const o of this.#outputs) {
      if (p.offsets.get(o) === at) {
        output = o;
        break;
      }
    }
    if (output === undefined) return false;
    const [tb, to] = [p.types.get(b.value)!, p.types.get(output)!];
    if (tb.dtype !== to.dtype || sizeOf(tb.shape) !== sizeOf(to.shape)) return false;
    const from = place.at;
    p.offsets.set(b.value, at);
    p.offsets.set(output, from);
    p.places[i] = { at, dtype: place.dtype };
    for (const [value, to] of [[b.value, at], [output, from]]) {
      for (const [n, j] of this.#users.get(value) ?? []) {
        p.addresses[n][j] = to;
        p.table[p.tableAt[n] + j] = to;
        this.#moved.add(n);
      }
    }
    return true;
  }

  /**
   * Binds anew each kernel whose addresses the swaps since the last call changed, once however
   * many of its buffers moved (a decode step's 48 caches moved the kernels that read both a key
   * and a value cache twice); a run's swaps end with it.
   */
  settle(): void {
    this.#moved.forEach((n) => this.#p.rebind(n));
    this.#moved.clear();
  }
}

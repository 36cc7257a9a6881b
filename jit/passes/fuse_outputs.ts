/**
 * Graph outputs read through reshapes during fusion's walk. A graph output is stored at the walk's
 * end, but a consumer may need a reshaped view of it stored sooner: a decode step's attention
 * reads each layer's present cache unsqueezed under its heads' broadcast. Storing that view
 * computed the cache's update into a buffer of its own, and the end computed every layer's present
 * again (one kernel of 48 outputs, a second copy of the whole cache, 1.9 ms of a 0.5B decoder's
 * step on one thread of the 2-core VM). Stored early instead, the output is that buffer, read
 * through the reshape.
 *
 * @module
 */
import { type IndexStep, reindex } from "../ir/kernel_ir.ts";
import { isBare, type Sym } from "./fuse_values.ts";

/** How fusion stores a graph output (`Fuser.#store`) and reads a stored value (its buffer's symbol). */
export interface OutputStore {
  /** Stores `s` as graph output `value`, saying why. */
  store(s: Sym, value: number, why: string): void;
  /** The symbol of stored value `value`, of type `type`. */
  buffer(value: number, type: Sym["type"]): Sym;
  /** A graph value's name. */
  name(value: number): string;
}

/** The graph outputs of a walk, by symbol, and those it stored before its end. */
export class OutputViews {
  readonly #outputOf = new Map<Sym, number>();
  readonly #early = new Set<number>();
  readonly #to: OutputStore;

  /** Outputs stored through `to`. */
  constructor(to: OutputStore) {
    this.#to = to;
  }

  /** Notes that `s` is graph output `value` (the first symbol to be it). */
  note(s: Sym, value: number): void {
    if (!this.#outputOf.has(s)) this.#outputOf.set(s, value);
  }

  /**
   * `Sym.viewOf` of `s` moved by `steps`: where `s` is a graph output (or a view of one) that is
   * not yet a buffer and the steps only reshape it.
   */
  after(s: Sym, steps: readonly IndexStep[]): Sym["viewOf"] {
    const view = s.viewOf ?? (this.#outputOf.has(s) ? { sym: s, steps: [] } : undefined);
    if (!view || isBare(s) || !steps.every((x) => x.kind === "reshape")) return undefined;
    return { sym: view.sym, steps: [...view.steps, ...steps] };
  }

  /**
   * `s` read through the buffer of the graph output it views, that output stored now (once);
   * `undefined` where `s` views none.
   */
  read(s: Sym): Sym | undefined {
    const value = s.viewOf && this.#outputOf.get(s.viewOf.sym);
    if (value === undefined) return undefined;
    const output = s.viewOf!.sym;
    if (!this.#early.has(value)) {
      this.#to.store(output, value, `graph output "${this.#to.name(value)}", read reshaped`);
      this.#early.add(value);
    }
    const stored = this.#to.buffer(value, output.type);
    return { ...stored, expr: reindex(stored.expr, s.viewOf!.steps), buffer: undefined };
  }

  /** Stores the graph outputs `outputs` (by value, their symbols in `syms`) not yet stored. */
  storeRest(outputs: Iterable<number>, syms: ReadonlyMap<number, Sym>): void {
    for (const v of outputs) {
      const s = syms.get(v)!;
      if (s.buffer === v || this.#early.has(v)) continue;
      this.#to.store(s, v, `graph output "${this.#to.name(v)}"`);
    }
  }
}

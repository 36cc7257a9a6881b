/**
 * Values the same at every point of a kernel, hoisted: a load of a one-element buffer and what
 * is computed from such loads and constants alone (a DynamicQuantizeLinear's scale and zero
 * point from its two range words, which fusion leaves to each reader: `combined.ts`). Each is
 * assigned once at the start of the entry point, to a private variable that helper functions see
 * too, instead of at every point: a product's epilogue had computed the zero point's 30
 * operations for each of a thread's outputs.
 *
 * @module
 */
import type { Expr, KernelIR } from "../../jit/ir/kernel_ir.ts";
import { sizeOf } from "../../jit/ir/shape.ts";
import { sameEverywhere } from "../../jit/ir/access.ts";
import { type UniformValues, wgslType } from "./expr.ts";
import { Emitter } from "./emit.ts";

/** A kernel's hoisted values: their declarations and the assignments that start its entry point. */
export class Uniforms implements UniformValues {
  /** Module-scope declarations of the hoisted values. */
  readonly decls: string[] = [];
  /** Their computation, in order, for the start of the entry point. */
  readonly e: Emitter = new Emitter("u");
  /** The values computed there, shared by every point. */
  readonly memo: Map<Expr, string> = new Map();
  /** The name each hoisted value was assigned to. */
  readonly named: Map<Expr, string> = new Map();
  readonly #kernel: KernelIR;
  readonly #same = new Map<Expr, boolean>();

  /** Hoisted values of `kernel`. */
  constructor(kernel: KernelIR) {
    this.#kernel = kernel;
  }

  /** Whether `e` is the same at every point (`sameEverywhere`). */
  same(e: Expr): boolean {
    const inputs = this.#kernel.inputs;
    return sameEverywhere(e, (i) => sizeOf(inputs[i].shape) === 1, this.#same);
  }

  /** Hoists `e`, computed by WGSL `code`, and returns its name. */
  hoist(e: Expr, code: string): string {
    const name = `h${this.named.size}`;
    this.decls.push(`var<private> ${name}: ${wgslType(e.dtype)};`);
    this.e.line(`${name} = ${code};`);
    this.named.set(e, name);
    return name;
  }
}

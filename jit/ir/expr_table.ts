/**
 * Structural identity of kernels: hash-consing of expressions (structurally equal nodes made one
 * object with one id) and a kernel's canonical text, the key of the kernel cache, of compile's
 * dedupe of equal kernels and of the tuning notes.
 *
 * @module
 */
import type { Expr, IndexStep, KernelBuffer, KernelIR, Load } from "./kernel_ir.ts";

/** JSON that keeps -0, NaN and ±Infinity apart (plain JSON writes `0` and `null`). */
function exactJson(v: unknown): string {
  return JSON.stringify(
    v,
    (_key, x) =>
      typeof x === "number" && Object.is(x, -0)
        ? "-0"
        : typeof x === "number" && !Number.isFinite(x)
        ? String(x)
        : x,
  );
}

/**
 * Hash-consing of expressions: structurally equal nodes get one id and one canonical object, so
 * the expressions of a kernel form a DAG whose shared nodes every pass memoizing by identity
 * (code generators, the interpreter, hashing) handles once. Each node's key names its operands by
 * id, so interning is linear in the DAG's size however often its nodes are shared.
 */
export class ExprTable {
  /** The distinct nodes in first-seen order, operands (and gather indices) written as ids. */
  readonly nodes: string[] = [];
  #ids = new Map<string, number>();
  #of = new Map<Expr, number>();
  #canonical: Expr[] = [];

  /** The id of `e`'s structure. */
  id(e: Expr): number {
    const known = this.#of.get(e);
    if (known !== undefined) return known;
    let key: string, canonical: Expr;
    if (e.kind === "alu") {
      const args = e.args.map((a) => this.id(a));
      // exactJson's text of { alu, dtype, attrs, args }, written directly: JSON.stringify with
      // a replacer over every node was a third of fusing lstm2's 47 kernels.
      key = `{"alu":${JSON.stringify(e.op)},"dtype":${JSON.stringify(e.dtype)},"attrs":${
        e.attrs == null ? "null" : exactJson(e.attrs)
      },"args":[${args.join(",")}]}`;
      canonical = { ...e, args: args.map((i) => this.#canonical[i]) };
    } else if (e.kind === "load") {
      const steps = this.#steps(e.steps);
      key = exactJson({ load: e.input, dtype: e.dtype, steps: steps.ids });
      canonical = { ...e, steps: steps.canonical };
    } else {
      key = exactJson(e);
      canonical = e;
    }
    let id = this.#ids.get(key);
    if (id === undefined) {
      id = this.nodes.length;
      this.nodes.push(key);
      this.#ids.set(key, id);
      this.#canonical.push(canonical);
    }
    this.#of.set(e, id);
    return id;
  }

  /** The one object standing for every node structurally equal to `e`. */
  canonical(e: Expr): Expr {
    return this.#canonical[this.id(e)];
  }

  /** A step chain with each gather index as an id (for keys) and canonical (for the kernel). */
  #steps(steps: readonly IndexStep[]): { ids: unknown[]; canonical: IndexStep[] } {
    return {
      ids: steps.map((s) => (s.kind === "gather" ? { ...s, index: this.id(s.index) } : s)),
      canonical: steps.map((s) =>
        s.kind === "gather" ? { ...s, index: this.canonical(s.index) as Load } : s
      ),
    };
  }

  /** A step chain's key, gather indices by id. */
  stepsKey(steps: readonly IndexStep[]): unknown[] {
    return this.#steps(steps).ids;
  }
}

/** `kernel` with structurally equal subexpressions (across all its expressions) made one object. */
export function shareExprs(kernel: KernelIR): KernelIR {
  const table = new ExprTable();
  return {
    ...kernel,
    reductions: kernel.reductions.map((r) => ({ ...r, expr: table.canonical(r.expr) })),
    outputs: kernel.outputs.map((o) => ({ ...o, expr: table.canonical(o.expr) })),
  };
}

/** Each kernel's text, computed once: the cache key, compile's dedupe and its tuning note. */
const texts = new WeakMap<KernelIR, string>();

/**
 * Canonical text of a kernel, excluding graph value ids (so equal computations share a key). The
 * expressions are written as a node table (operands by index), so the text grows with the DAG,
 * not with the tree a shared subexpression would unfold to.
 */
export function kernelText(k: KernelIR): string {
  let text = texts.get(k);
  if (text === undefined) texts.set(k, text = writeKernelText(k));
  return text;
}

function writeKernelText(k: KernelIR): string {
  const table = new ExprTable();
  // How a buffer is held (`packed`) decides its code as its type does.
  const buffer = (b: KernelBuffer) => ({ shape: b.shape, dtype: b.dtype, packed: b.packed });
  const reductions = k.reductions.map((r) => ({
    op: r.op,
    dtype: r.dtype,
    expr: table.id(r.expr),
  }));
  const outputs = k.outputs.map((o) => ({
    ...buffer(o),
    expr: table.id(o.expr),
    steps: table.stepsKey(o.steps),
    level: o.level,
    ...(o.combine && { combine: o.combine }),
  }));
  const head = exactJson({
    pattern: k.pattern,
    space: k.space,
    reduced: k.reduced,
    inputs: k.inputs.map(buffer),
    reductions,
    outputs,
    opaque: k.opaque,
    // A prologue by its node, as the kernel's expressions are written.
    blockProduct: k.blockProduct &&
      { ...k.blockProduct, prologue: k.blockProduct.prologue && table.id(k.blockProduct.prologue) },
    blockUnpack: k.blockUnpack,
    exact: k.exact,
    inPlace: k.inPlace,
  });
  return [head, ...table.nodes].join("\n");
}

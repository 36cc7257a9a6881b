/**
 * Names in scope while the importer converts a graph or an inlined subgraph (If branches, Loop
 * bodies): tensors, sequences and empty optionals by name, who wrote each name, and the enclosing
 * graph's scope, whose names a subgraph sees.
 *
 * @module
 */
import { KilnError } from "../../jit/support/errors.ts";
import type { Known, Producer, Sequence } from "./node_context.ts";

/** Names in scope while a graph or an inlined subgraph is converted. */
export interface Scope {
  /** Tensors by name. */
  readonly values: Map<string, Known>;
  /** Sequences by name. */
  readonly sequences: Map<string, readonly Known[]>;
  /** Which node wrote each name (duplicates are errors). */
  readonly written: Map<string, string>;
  /** Names bound to an empty optional. */
  readonly absent: Set<string>;
  /** The node that made each name, with its inputs (what Gradient differentiates). */
  readonly made: Map<string, Producer>;
  /** The enclosing graph's scope (a subgraph sees outer names). */
  readonly parent?: Scope;
}

/** An empty scope inside `parent`. */
export function innerScope(parent: Scope): Scope {
  return {
    values: new Map(),
    sequences: new Map(),
    written: new Map(),
    made: new Map(),
    absent: new Set(),
    parent,
  };
}

/** Whether `name` is an empty optional in `scope` or an enclosing one. */
export function isAbsent(scope: Scope, name: string): boolean {
  for (let s: Scope | undefined = scope; s; s = s.parent) {
    if (s.absent.has(name)) return true;
    if (s.values.has(name) || s.sequences.has(name)) return false;
  }
  return false;
}

/** A name's tensor or sequence in `scope` or an enclosing one. */
export function lookup(scope: Scope, name: string): Known | Sequence | undefined {
  for (let s: Scope | undefined = scope; s; s = s.parent) {
    const k = s.values.get(name);
    if (k) return k;
    const items = s.sequences.get(name);
    if (items) return { kind: "sequence", items };
  }
  return undefined;
}

/** The node that made `name` in `scope` or an enclosing one. */
export function producerOf(scope: Scope, name: string): Producer | undefined {
  for (let s: Scope | undefined = scope; s; s = s.parent) {
    const p = s.made.get(name);
    if (p) return p;
  }
  return undefined;
}

/** The error of a sequence given where a tensor is needed. */
export function notTensor(label: string, i: number): never {
  throw new KilnError(`${label}: input ${i} is a sequence; the op needs a tensor`, {
    code: "invalid-graph",
    fix: "pass a tensor (SequenceAt or ConcatFromSequence make one from a sequence)",
  });
}

/** The error of a tensor (or nothing) given where a sequence is needed. */
export function notSequence(label: string, i: number): never {
  throw new KilnError(`${label}: input ${i} is not a sequence`, {
    code: "invalid-graph",
    fix: "pass a sequence (SequenceConstruct makes one from tensors)",
  });
}

/** The error of a required input the model leaves out (absent, or named ""). */
export function missingInput(label: string, i: number): never {
  throw new KilnError(`${label}: input ${i} is required but missing`, {
    code: "invalid-graph",
    fix:
      "give the node every input its op requires (see the ONNX operator spec); re-export the model",
  });
}

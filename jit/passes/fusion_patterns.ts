/**
 * The pattern rules of fusion, as tables: which row kernels are softmax or layer norm (named
 * after the reductions they hold), and which chains of kernels form a group that a backend may
 * run as one kernel (attention: scores → weights → weighted values). A new pattern is one more
 * row; the fusion walk does not change.
 *
 * @module
 */
import type { KernelIR, KernelPattern, ReduceOp } from "../ir/kernel_ir.ts";

/** A row rule: a reduce kernel whose reductions are `reductions`, in order, is `pattern`. */
interface RowRule {
  readonly pattern: KernelPattern;
  readonly reductions: readonly ReduceOp[];
}

/** Row kernels named after what they compute. */
const ROW_RULES: readonly RowRule[] = [
  // max of the row, then the sum of exp(x - max)
  { pattern: "softmax", reductions: ["max", "sum"] },
  // mean, then the mean of squared deviations
  { pattern: "layernorm", reductions: ["mean", "mean"] },
];

/**
 * The pattern of a kernel of `pattern` holding `reductions`: a row rule's name when it is a
 * reduce kernel that also writes full rows (`fullRows`), else `pattern` unchanged.
 */
export function rowPattern(
  pattern: KernelPattern,
  reductions: readonly ReduceOp[],
  fullRows: boolean,
): KernelPattern {
  if (pattern !== "reduce" || !fullRows) return pattern;
  const rule = ROW_RULES.find((r) =>
    r.reductions.length === reductions.length && r.reductions.every((op, i) => op === reductions[i])
  );
  return rule?.pattern ?? pattern;
}

/** A chain rule: kernels of these patterns, each read only by the next, form one `name` group. */
interface ChainRule {
  readonly name: string;
  readonly links: readonly KernelPattern[];
}

/** Groups of kernels a backend may fuse further. */
const CHAIN_RULES: readonly ChainRule[] = [
  { name: "attention", links: ["matmul", "softmax", "matmul"] },
];

/** Tags each chain of `kernels` that a chain rule matches with its group name; logs each. */
export function groupChains(kernels: KernelIR[], log: string[]): KernelIR[] {
  const readers = (value: number) => kernels.filter((k) => k.inputs.some((b) => b.value === value));
  const onlyInto = (from: KernelIR, to: KernelIR) =>
    from.outputs.length === 1 && readers(from.outputs[0].value).length === 1 &&
    readers(from.outputs[0].value)[0] === to;
  const out = [...kernels];
  for (const rule of CHAIN_RULES) {
    let count = 0;
    for (const first of kernels) {
      if (first.pattern !== rule.links[0]) continue;
      const chain = [first];
      for (const link of rule.links.slice(1)) {
        const prev = chain[chain.length - 1];
        const next = kernels.find((k) => k.pattern === link && onlyInto(prev, k));
        if (!next) break;
        chain.push(next);
      }
      if (chain.length < rule.links.length) continue;
      const group = `${rule.name}_${count++}`;
      for (const k of chain) out[kernels.indexOf(k)] = { ...out[kernels.indexOf(k)], group };
      log.push(`${group}: ${chain.map((k) => k.name).join(" → ")} form one ${rule.name} group`);
    }
  }
  return adjacentGroups(out);
}

/**
 * `kernels` with each group's members next to each other, as a backend fusing them needs: a
 * kernel scheduled between members (an f16 precision's cast of the values, say) moves before the
 * group's first member. That keeps the order valid: the members' outputs but the last are read
 * only by the next member, so nothing between them reads a member's output.
 */
function adjacentGroups(kernels: readonly KernelIR[]): KernelIR[] {
  const out = [...kernels];
  for (const name of new Set(kernels.map((k) => k.group).filter((g) => g !== undefined))) {
    const first = out.findIndex((k) => k.group === name);
    const last = out.findLastIndex((k) => k.group === name);
    const span = out.slice(first, last + 1);
    const between = span.filter((k) => k.group !== name);
    out.splice(first, span.length, ...between, ...span.filter((k) => k.group === name));
  }
  return out;
}

/**
 * {@linkcode runOp}: one op on host tensors, through the same pipeline as a graph (legalize,
 * fuse, schedule, codegen through the kernel cache, run). It is the only way to run a single op:
 * backends run kernels or graphs, never ops of their own.
 *
 * @module
 */
import { compile, type CompileOptions } from "../compile.ts";
import { COMPILE_OPTIONS, compileOptionsOf } from "../compile_options.ts";
import type { DType } from "../ir/dtype.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { checkHostTensor, type HostTensor } from "../ir/host_tensor.ts";
import { type Attrs, inferNode } from "../ops/mod.ts";
import { checkOptions, KilnError, shown } from "../support/errors.ts";

/** The option names {@linkcode runOp} takes. */
const RUN_OP_OPTIONS: readonly string[] = [...COMPILE_OPTIONS, "outputs"];

/** Options of {@linkcode runOp}: those of `compile`, and how many outputs the op has. */
export interface RunOpOptions extends CompileOptions {
  /** Outputs the op produces (default: as its shape rule infers, e.g. Split's `split` count). */
  readonly outputs?: number;
}

/**
 * Runs `op` on `inputs` as a one-node graph and returns its outputs.
 *
 * @example
 * ```ts
 * import { runOp } from "../../mod.ts";
 * const [y] = await runOp("Add", [
 *   { data: new Float32Array([1, 2]), shape: [2], dtype: "f32" },
 *   { data: new Float32Array([10]), shape: [1], dtype: "f32" },
 * ], {}, { backend: "wasm" });
 * console.log(y.data); // Float32Array [11, 12]
 * ```
 */
export async function runOp(
  op: string,
  inputs: readonly HostTensor[],
  attrs: Attrs = {},
  options: RunOpOptions = {},
): Promise<HostTensor[]> {
  if (typeof op !== "string") {
    throw new KilnError(`runOp takes an op's name first, got ${shown(op)}`, {
      code: "bad-input",
      fix: 'pass e.g. runOp("Add", [a, b])',
    });
  }
  // A misspelt option (`backnd`) had run where the defaults say, without a word.
  checkOptions(options, RUN_OP_OPTIONS, `runOp ${op}`);
  if (!Array.isArray(inputs)) {
    throw new KilnError(`runOp ${op}: inputs are ${shown(inputs)}, not a list of tensors`, {
      code: "bad-input",
      fix: "pass [{ data, shape, dtype }, …] (one HostTensor per input)",
    });
  }
  const checked = inputs.map((t, i) => checkHostTensor(t, `${op} input ${i}`));
  const b = new GraphBuilder();
  const ins = checked.map((t, i) => b.input(`x${i}`, t.shape, t.dtype));
  const types = checked.map((t) => ({
    shape: t.shape,
    dtype: (t.dtype === "i64" ? "i32" : t.dtype) as DType,
  }));
  const count = options.outputs ?? inferNode(op, types, attrs, `op ${op}`).length;
  const outs = b.opN(op, ins, attrs, count);
  outs.forEach((o, i) => b.output(`y${i}`, o));
  const exe = await compile(b.build(), compileOptionsOf(options));
  try {
    const result = await exe.run(Object.fromEntries(checked.map((t, i) => [`x${i}`, t])));
    return outs.map((_, i) => result[`y${i}`]);
  } finally {
    exe.dispose();
  }
}

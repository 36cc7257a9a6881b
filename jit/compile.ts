/**
 * `compile(graph, options)`: the pipeline's entry. Today it is legalize → backend compile; fusion
 * and scheduling slot in between without changing this call.
 *
 * @module
 */
import type { Backend } from "../backends/backend.ts";
import { BackendRegistry } from "../backends/registry.ts";
import { Executable } from "./executable.ts";
import type { Graph } from "./graph.ts";
import { legalize } from "./legalize.ts";

/** Options for {@linkcode compile}. */
export interface CompileOptions {
  /** Backend id or instance (default `"reference"`). */
  readonly backend?: string | Backend;
  /** Registry to resolve backend ids in (default: the built-in backends). */
  readonly registry?: BackendRegistry;
}

let defaultRegistry: BackendRegistry | undefined;

/** The process-wide registry with the built-in backends. */
export function defaultBackends(): BackendRegistry {
  return defaultRegistry ??= BackendRegistry.withDefaults();
}

/**
 * Compiles `graph` into an {@linkcode Executable}.
 *
 * @example
 * ```ts
 * import { compile, GraphBuilder } from "../mod.ts";
 * const b = new GraphBuilder();
 * b.output("y", b.op("Exp", [b.input("x", [2])]));
 * const exe = await compile(b.build());
 * const { y } = await exe.run({ x: { data: new Float32Array([0, 1]), shape: [2], dtype: "f32" } });
 * console.log(y.data); // Float32Array [1, 2.718…]
 * ```
 */
export async function compile(graph: Graph, options: CompileOptions = {}): Promise<Executable> {
  const registry = options.registry ?? defaultBackends();
  const backend = typeof options.backend === "object"
    ? options.backend
    : registry.get(options.backend ?? "reference");
  const start = performance.now();
  await backend.prepare();
  const program = await backend.compile(legalize(graph, backend, registry), { name: "graph" });
  return new Executable({ graph, backend, program, compileMs: performance.now() - start });
}

/**
 * `compile(graph, options)`: the pipeline's entry — graph → legalize → fuse → codegen (through the
 * kernel cache) → program → {@linkcode Executable}. A backend without a kernel-IR code generator
 * gets the legalized graph through its own `compile` instead.
 *
 * @module
 */
import type { Backend, Program } from "../backends/backend.ts";
import { BackendRegistry } from "../backends/registry.ts";
import { Executable, type PlanInfo } from "./executable.ts";
import { fuse } from "./fuse.ts";
import type { Graph } from "./graph.ts";
import { defaultKernelCache, type KernelCache } from "./kernel_cache.ts";
import { legalize } from "./legalize.ts";
import { planMemory } from "./memory_plan.ts";
import { hostProgram } from "./program.ts";

/** Options for {@linkcode compile}. */
export interface CompileOptions {
  /** Backend id or instance (default `"reference"`). */
  readonly backend?: string | Backend;
  /** Registry to resolve backend ids in (default: the built-in backends). */
  readonly registry?: BackendRegistry;
  /** Kernel cache (default: the process-wide one); `false` generates every kernel afresh. */
  readonly cache?: KernelCache | false;
  /** Fuse into kernels (default true); `false` runs the legalized graph node by node. */
  readonly fuse?: boolean;
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
  const legal = legalize(graph, backend, registry);
  let program: Program;
  let plan: PlanInfo | undefined;
  if (backend.codegen && options.fuse !== false) {
    const fusion = fuse(legal);
    const cache = options.cache === false ? undefined : options.cache ?? defaultKernelCache();
    const sources = { memory: 0, disk: 0, generated: 0 };
    const prepared = await Promise.all(fusion.kernels.map(async (k) => {
      const { artifact, source } = cache
        ? await cache.artifact(k, backend)
        : { artifact: backend.codegen!.generate(k), source: "generated" as const };
      sources[source]++;
      return backend.codegen!.load(k, artifact);
    }));
    const external = new Set([...legal.outputs.map((o) => o.value), ...fusion.constants.keys()]);
    const memory = planMemory(fusion.kernels, external);
    program = hostProgram({
      graph: legal,
      kernels: fusion.kernels,
      prepared,
      constants: fusion.constants,
    });
    plan = { backend: backend.id, kernels: fusion.kernels, log: fusion.log, memory, sources };
  } else {
    program = await backend.compile(legal, { name: "graph" });
  }
  return new Executable({ graph, backend, program, compileMs: performance.now() - start, plan });
}

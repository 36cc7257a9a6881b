/**
 * {@linkcode BackendRegistry}: the backends a program can place work on. The reference backend is
 * always there (it is the oracle); `withDefaults()` adds every built-in backend that can run in
 * the current environment.
 *
 * @module
 */
import { KilnError } from "../jit/support/errors.ts";
import type { Backend, BackendSet, NodeInfo } from "../jit/runtime/backend.ts";
import { ReferenceBackend } from "./reference/reference_backend.ts";
import { WasmBackend } from "./wasm/wasm_backend.ts";
import { WebGpuBackend } from "./webgpu/webgpu_backend.ts";
import { gpuChoice } from "./webgpu/gpu_choice.ts";

/** A set of backends keyed by id. */
export class BackendRegistry implements BackendSet {
  #backends = new Map<string, Backend>();

  /** A registry holding only the reference backend. */
  constructor() {
    this.register(new ReferenceBackend());
  }

  /**
   * A registry with every built-in backend available here: reference, wasm, and WebGPU where
   * `navigator.gpu` exists or `KILN_GPU=dawn` names Dawn.
   */
  static withDefaults(): BackendRegistry {
    const r = new BackendRegistry().register(new WasmBackend());
    if (gpuChoice() === "dawn" || WebGpuBackend.available()) r.register(new WebGpuBackend());
    else if (dawnInstalled()) r.register(new WebGpuBackend({ gpu: "dawn" }));
    return r;
  }

  /** Adds a backend; an id already present is refused unless `replace` is set. */
  register(backend: Backend, options?: { replace?: boolean }): this {
    if (
      typeof backend?.id !== "string" ||
      (typeof backend.compile !== "function" && typeof backend.codegen?.generate !== "function")
    ) {
      throw new KilnError("register() needs an object implementing Backend", {
        code: "backend",
        fix: "extend BackendBase or implement the Backend interface (compile(graph) or codegen)",
      });
    }
    if (this.#backends.has(backend.id) && !options?.replace) {
      throw new KilnError(`A backend with id "${backend.id}" is already registered`, {
        code: "duplicate-name",
        fix: "give the backend another id, or pass { replace: true }",
      });
    }
    this.#backends.set(backend.id, backend);
    return this;
  }

  /** The backend with `id`; the error lists the registered ids. */
  get(id: string): Backend {
    const b = this.#backends.get(id);
    if (b) return b;
    const gpu = id === "webgpu" && onNode()
      ? "; on Node, WebGPU comes from Dawn: npm install webgpu (kiln then registers it)"
      : "";
    throw new KilnError(`No backend "${id}" is registered`, {
      code: "backend",
      fix: `use one of: ${[...this.#backends.keys()].join(", ")}${gpu}`,
    });
  }

  /** Whether a backend with `id` is registered. */
  has(id: string): boolean {
    return this.#backends.has(id);
  }

  /** Every registered backend, in registration order. */
  list(): Backend[] {
    return [...this.#backends.values()];
  }

  /** The backends that can run `node` as it is (before any decomposition). */
  backendsFor(node: NodeInfo): Backend[] {
    return this.list().filter((b) => !b.deviceLost && b.supports(node));
  }
}

/** Whether this is Node (or Bun), where no `navigator.gpu` exists and Dawn is a package. */
function onNode(): boolean {
  const g = globalThis as { Deno?: unknown; process?: { versions?: { node?: string } } };
  return !g.Deno && !!g.process?.versions?.node;
}

/**
 * Whether Node can load Dawn, the `webgpu` package (resolved, not loaded: loading starts a GPU
 * process). Deno and browsers answer no: there Dawn is asked for by name (`KILN_GPU=dawn`).
 */
function dawnInstalled(): boolean {
  if (!onNode()) return false;
  try {
    const resolve = (import.meta as { resolve?: (s: string) => string }).resolve;
    return typeof resolve === "function" && !!resolve("webgpu");
  } catch {
    return false;
  }
}

let defaults: BackendRegistry | undefined;

/**
 * The process-wide registry with the built-in backends (created on first use): what `compile`
 * uses when no `registry` is given. Register custom backends here to make every policy see them.
 */
export function defaultBackends(): BackendRegistry {
  return defaults ??= BackendRegistry.withDefaults();
}

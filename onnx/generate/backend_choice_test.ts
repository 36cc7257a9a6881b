/**
 * Where a generation runs when no backend is named: one backend for prefill and decode, a
 * hardware GPU first, never a software one, the next backend where the first cannot compile.
 */
import assert from "node:assert/strict";
import { BackendRegistry } from "../../backends/registry.ts";
import { WasmBackend } from "../../backends/wasm/wasm_backend.ts";
import type { BackendKind, DeviceProfile, NodeInfo } from "../../jit/runtime/backend.ts";
import { OnnxModel } from "../model.ts";
import { generationBackends } from "./backend_choice.ts";
import { generate } from "./generate.ts";

const DIR = new URL("../testdata/decoders/", import.meta.url);
const recorded: Record<string, { prompt: number[]; greedy: number[] }> = JSON.parse(
  await Deno.readTextFile(new URL("decoders.json", DIR)),
);

/** A stand-in GPU: wasm's code under a GPU's kind, its device software or not, its ops all or none. */
class StandInGpu extends WasmBackend {
  override readonly id: string = "stand-in-gpu";
  override readonly kind: BackendKind = "gpu";
  readonly #software: boolean;
  readonly #runs: boolean;

  constructor(options: { software: boolean; runs: boolean }) {
    super({ threads: 1 });
    this.#software = options.software;
    this.#runs = options.runs;
  }

  override capabilities(): DeviceProfile {
    return { ...super.capabilities(), software: this.#software };
  }

  override supports(node: NodeInfo): boolean {
    return this.#runs && super.supports(node);
  }
}

/** A registry of the reference, one-thread wasm and `gpu`. */
const registryWith = (gpu?: StandInGpu) => {
  const r = new BackendRegistry().register(new WasmBackend({ threads: 1 }));
  return gpu ? r.register(gpu) : r;
};

Deno.test("generationBackends: a hardware GPU first, then compiled CPU code, the interpreter last", async () => {
  const ids = async (gpu?: StandInGpu) =>
    (await generationBackends({ registry: registryWith(gpu) })).map((b) => b.id);
  assert.deepEqual(await ids(new StandInGpu({ software: false, runs: true })), [
    "stand-in-gpu",
    "wasm",
    "reference",
  ]);
  // A software adapter is exact but slow: only a caller who names it generates there.
  assert.deepEqual(await ids(new StandInGpu({ software: true, runs: true })), [
    "wasm",
    "reference",
  ]);
  assert.deepEqual(await ids(), ["wasm", "reference"]);
});

Deno.test("generationBackends: a named backend, a policy or fusion off leave the options as they are", async () => {
  const registry = registryWith(new StandInGpu({ software: false, runs: true }));
  for (const o of [{ backend: "wasm" }, { policy: "local-first" as const }, { fuse: false }]) {
    assert.deepEqual(await generationBackends({ registry, ...o }), [], JSON.stringify(o));
  }
});

Deno.test("generate: unnamed, both steps run on the hardware GPU, or on wasm past one that cannot compile them", async () => {
  const { prompt, greedy } = recorded.genai_tiny;
  const model = await OnnxModel.load(new URL("genai_tiny.onnx", DIR));
  for (const [runs, where] of [[true, "stand-in-gpu"], [false, "wasm"]] as const) {
    const registry = registryWith(new StandInGpu({ software: false, runs }));
    const g = generate(model, prompt, { maxNewTokens: 6, registry, cache: false });
    assert.deepEqual(await g.collect(), greedy.slice(0, 6));
    assert.equal(g.stats!.backend, where);
    assert.deepEqual(g.executables.map((e) => e.backend.id), [where, where]);
  }
});

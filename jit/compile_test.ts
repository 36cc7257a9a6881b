import assert from "node:assert/strict";
import { compile, estimateWork, explain, GraphBuilder, KilnError, runOp } from "../mod.ts";
import { fuse } from "./passes/fuse.ts";
import { fusionFor } from "./compile.ts";
import type { DeviceProfile } from "./runtime/backend.ts";
import { ReferenceBackend } from "../backends/reference/reference_backend.ts";

Deno.test("compile of fuse()'s plan, or of anything but a graph, is a typed error", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Relu", [b.input("x", [4])]));
  const plan = fuse(b.build());
  for (const bad of [plan, undefined, {}, "graph"]) {
    await assert.rejects(
      () => compile(bad as never),
      (e) =>
        e instanceof KilnError && e.code === "bad-input" &&
        /compile\(\) takes a Graph/.test(e.message),
    );
  }
  // explain() of something other than an executable compiles it, and is refused the same way.
  await assert.rejects(() => explain(null as never), (e) => e instanceof KilnError);
  // Options that are not an object: a backend's name there had been ignored.
  const graph = b.build();
  await assert.rejects(
    () => compile(graph, "wasm" as never),
    (e) => e instanceof KilnError && /takes an object of options, got "wasm"/.test(e.message),
  );
  // A misspelt option had been ignored: precison: "f16" compiled in f32.
  await assert.rejects(
    () => compile(graph, { precison: "f16" } as never),
    (e) => e instanceof KilnError && /no option "precison".*precision/.test(e.message),
  );
  await assert.rejects(() => compile(graph, null as never), (e) => e instanceof KilnError);
  // The other entries that take a graph, or a list of tensors.
  assert.throws(() => estimateWork(null as never), (e) => e instanceof KilnError);
  await assert.rejects(() => runOp("Relu", null as never), (e) => e instanceof KilnError);
  // runOp of no op name had failed inside (`null.toLowerCase`); a misspelt option was ignored.
  const x = { data: new Float32Array([1]), shape: [1], dtype: "f32" as const };
  await assert.rejects(() => runOp(null as never, [x]), (e) => e instanceof KilnError);
  await assert.rejects(
    () => runOp("Relu", [x], {}, { backnd: "wasm" } as never),
    (e) => e instanceof KilnError && /no option "backnd"/.test(e.message),
  );
  // …and a misspelt attribute too (LeakyRelu's `alpha`).
  await assert.rejects(
    () => runOp("LeakyRelu", [x], { alhpa: 0.5 }),
    (e) =>
      e instanceof KilnError && e.code === "bad-attribute" && /no attribute alhpa/.test(e.message),
  );
});

Deno.test("fusion's choices follow every generator that may run a kernel", () => {
  const reference = new ReferenceBackend().capabilities();
  const gpu: DeviceProfile = {
    ...reference,
    name: "gpu",
    blockPrologues: true,
    combinedRanges: true,
    storedPatches: 1000,
    splitSums: true,
    storedKeys: 4096,
    matrixUnits: true,
    packedRows: true,
    roundingProducts: true,
    keptStores: true,
  };
  const wasm: DeviceProfile = {
    ...reference,
    name: "wasm",
    storedOperands: true,
    blockProducts: true,
    integerDot: true,
    integerBlockRows: 32,
  };
  const stored: DeviceProfile = { ...reference, name: "stored", storedOperands: true };
  assert.deepEqual(fusionFor([gpu]), {
    integerDot: false,
    inlineOperands: true,
    blockProducts: true,
    blockUnpacks: false,
    keptStores: true,
    blockPrologues: true,
    combinedRanges: true,
    roundingProducts: true,
    patchesFrom: 1000,
    splitSums: true,
    halfPatches: true,
    integerBlockRows: 4,
    keysFrom: 4096,
  });
  assert.deepEqual(fusionFor([wasm]), {
    integerDot: true,
    inlineOperands: false,
    blockProducts: true,
    blockUnpacks: true,
    keptStores: false,
    blockPrologues: false,
    combinedRanges: false,
    roundingProducts: false,
    patchesFrom: Infinity,
    splitSums: false,
    halfPatches: false,
    integerBlockRows: 32,
    keysFrom: Infinity,
  });
  // Both candidates (auto on a GPU machine): block products stay tagged, so neither unpacks into
  // buffers, and integer ones of more rows than the GPU wants are not; A stays stored, as wasm
  // reads it; keys are stored by head as the GPU asks.
  assert.deepEqual(fusionFor([wasm, gpu]), {
    integerDot: false,
    inlineOperands: false,
    blockProducts: true,
    blockUnpacks: true,
    keptStores: false,
    blockPrologues: false,
    combinedRanges: false,
    roundingProducts: false,
    patchesFrom: Infinity,
    splitSums: false,
    halfPatches: false,
    integerBlockRows: 4,
    keysFrom: 4096,
  });
  assert.deepEqual(fusionFor([stored, gpu]), {
    integerDot: false,
    inlineOperands: false,
    blockProducts: false,
    blockUnpacks: false,
    keptStores: false,
    blockPrologues: false,
    combinedRanges: false,
    roundingProducts: false,
    patchesFrom: Infinity,
    splitSums: false,
    halfPatches: false,
    integerBlockRows: 4,
    keysFrom: 4096,
  });
  assert.deepEqual(fusionFor([]), {
    integerDot: false,
    inlineOperands: true,
    blockProducts: false,
    blockUnpacks: false,
    keptStores: false,
    blockPrologues: false,
    combinedRanges: false,
    roundingProducts: false,
    patchesFrom: Infinity,
    splitSums: false,
    halfPatches: false,
    integerBlockRows: 4,
    keysFrom: Infinity,
  });
});

Deno.test("placement hints of the wrong form are a KilnError, not ignored", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Relu", [b.input("x", [4])]));
  const graph = b.build();
  const refused = (options: object, re: RegExp) =>
    assert.rejects(
      () => compile(graph, { cache: false, ...options }),
      (e: unknown) => e instanceof KilnError && re.test(e.message),
      JSON.stringify(options),
    );
  await refused({ inputsOn: { X: "webgpu" } }, /inputsOn names "X"/);
  await refused({ inputsOn: { x: 1 } }, /inputsOn names "x" → 1/);
  await refused({ inputsOn: "webgpu" }, /inputsOn must map input names/);
  await refused({ workload: "server" }, /workload must be an object/);
  // The graph's own input names pass.
  using exe = await compile(graph, { cache: false, backend: "wasm", inputsOn: { x: "wasm" } });
  assert.ok(exe);
});

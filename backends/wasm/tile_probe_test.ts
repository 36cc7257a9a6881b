/**
 * The tile probe: both forms' modules run over their pass, their best times are real times, and
 * the verdict is taken once a process; a backend's kernels follow the verdict or its option.
 *
 * @module
 */
import assert from "node:assert/strict";
import { probeMadds, tileProbe } from "../../shaders/wasm/tile_probe.ts";
import { bestTimes, dotTilesFaster } from "./tile_probe.ts";
import { hasRelaxedSimd, WasmBackend } from "./wasm_backend.ts";

Deno.test("the tile probes run, timed, and the verdict is taken once", () => {
  for (const form of ["dot", "broadcast"] as const) {
    for (const fma of [false, true]) {
      const module = new WebAssembly.Module(tileProbe(form, fma) as Uint8Array<ArrayBuffer>);
      const run = new WebAssembly.Instance(module).exports.run as (reps: number) => number;
      // Zeroed memory: every sum 0.
      assert.equal(run(3), 0, `${form} ${fma}`);
    }
  }
  assert.equal(probeMadds("broadcast"), 4 * probeMadds("dot"), "a broadcast pass: four k a dot");
  const [dot, broadcast] = bestTimes(false);
  assert.ok(dot > 0 && broadcast > 0 && Number.isFinite(dot + broadcast), `${dot} ${broadcast}`);
  assert.equal(dotTilesFaster(false), dotTilesFaster(false));
});

Deno.test("a wasm backend's tiles are its option's, else the probe's verdict", async () => {
  for (const dotTiles of [true, false, undefined]) {
    const backend = new WasmBackend({ threads: 1, dotTiles });
    await backend.prepare();
    const dots = dotTiles ?? dotTilesFaster(hasRelaxedSimd());
    assert.equal(backend.codegen!.format.endsWith("-dots"), dots, String(dotTiles));
    backend.dispose();
  }
});

import assert from "node:assert/strict";
import { KilnError, ReferenceBackend } from "../../mod.ts";
import { backendRates, measurableMs, setBackendRates } from "./cost_model.ts";
import type { Executable, RunOptions } from "../runtime/executable.ts";
import type { Graph } from "../ir/graph.ts";
import { sizeOf } from "../ir/shape.ts";

/** A GPU as Deno shows one: every run waits a 10 ms readback, whatever its work. */
class ReadbackGpu extends ReferenceBackend {
  override readonly id = "readback-gpu-rates";
  override readonly kind = "gpu";
}

Deno.test("rates of the wrong form are refused, not kept as NaN estimates", () => {
  const rates = { bytesPerMs: 1e6, flopsPerMs: 1e7, dispatchMs: 0.01, syncMs: 0.1 };
  for (
    const bad of [
      { ...rates, transferBytesPerMs: Infinity, flops: 1 },
      rates,
      { ...rates, transferBytesPerMs: -1 },
      { ...rates, transferBytesPerMs: "fast" },
      "fast",
    ]
  ) {
    assert.throws(
      () => setBackendRates("rates-checked", bad as never),
      (e) => e instanceof KilnError && /setBackendRates/.test(e.message) && /Fix:/.test(e.message),
      JSON.stringify(bad),
    );
  }
  setBackendRates("rates-checked", { ...rates, transferBytesPerMs: Infinity });
  setBackendRates("rates-checked", undefined);
});

Deno.test("a GPU's rates come from repeated work in one submission, not from a readback", async () => {
  const bytesPerMs = 1e8, flopsPerMs = 1e9;
  // A probe "runs" in the readback plus its repetitions' work at the rates above: a matmul's
  // inputs are square (2m³ flops), a stream moves 8 bytes an element.
  const probe = (graph: Graph) => {
    const [x] = graph.inputs;
    const ms = x.shape.length === 2 && x.shape[0] > 4
      ? 2 * x.shape[0] ** 3 / flopsPerMs
      : 8 * sizeOf(x.shape) / bytesPerMs;
    const run = (_feeds: unknown, options?: RunOptions) =>
      new Promise((done) => setTimeout(done, 10 + (options?.repeat ?? 1) * ms));
    return Promise.resolve({ run, dispose() {} } as unknown as Executable);
  };
  const rates = await backendRates(new ReadbackGpu(), probe);
  setBackendRates("readback-gpu-rates", undefined);
  // Timed one run at a time, both came out as the clamp (about 5e8): the readback is all one sees.
  const near = (got: number, want: number) =>
    assert.ok(Math.abs(got / want - 1) < 0.25, `${got} against ${want}`);
  near(rates.bytesPerMs, bytesPerMs);
  near(rates.flopsPerMs, flopsPerMs);
  assert.ok(rates.syncMs > 8 && rates.syncMs < 14, `sync ${rates.syncMs}`);
});

Deno.test("a device's probes repeat until they add four readbacks' worth of time, at least 4 ms", () => {
  // Deno's WebGPU (11 ms a readback) as before; Dawn's (0.035 ms) a tenth of that; unmeasured 40.
  assert.equal(measurableMs(11), 44);
  assert.equal(measurableMs(0.035), 4);
  assert.equal(measurableMs(), 40);
});

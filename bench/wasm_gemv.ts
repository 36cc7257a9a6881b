/**
 * One-row products by 4-bit weights on the wasm backend (a decode step's, Qwen2.5-0.5B's shapes,
 * `bench/decode_kernels.ts`' `gemv4`), f32 A and A rounded to 8 bits, each timed alone: the median
 * of `--runs` runs after `--warm` runs, on `--threads` threads (default 1), weights per second.
 * The warm runs are many so that V8's optimizing tier has every kernel (the 896 → 1152 product
 * ran 250-360 µs after 10 runs, 100-160 after 300, on one thread of the 2-core VM). That VM's
 * speed moves by up to 2× over minutes: compare forms within one call, alternating.
 *
 *   deno run -A bench/wasm_gemv.ts [--threads 1] [--runs 50] [--warm 300]
 *
 * @module
 */
import { parseArgs } from "node:util";
import { compile, WasmBackend } from "../mod.ts";
import { gemv4 } from "./decode_kernels.ts";
import { median } from "./timed.ts";
import { f32 } from "../jit/testing/testing.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    threads: { type: "string", default: "1" },
    runs: { type: "string", default: "50" },
    warm: { type: "string", default: "300" },
  },
});
const backend = new WasmBackend({ threads: Number(values.threads), warmUpMs: 0 });
const shapes: [number, number][] = [[896, 1152], [896, 9728], [4864, 896], [896, 151936]];
for (const form of [undefined, "int8"] as const) {
  for (const [k, n] of shapes) {
    const kernel = gemv4(k, n, form);
    const exe = await compile(kernel.graph, { backend, cache: false });
    const feeds = { a: f32(kernel.inputs.a.data, kernel.inputs.a.shape) };
    for (let i = 0; i < Number(values.warm); i++) await exe.run(feeds);
    const times: number[] = [];
    for (let i = 0; i < Number(values.runs); i++) {
      const t = performance.now();
      await exe.run(feeds);
      times.push(performance.now() - t);
    }
    const ms = median(times);
    console.log(
      `${kernel.id}: ${(ms * 1000).toFixed(1)} µs, ${(k * n / ms / 1e6).toFixed(2)} G weights/s`,
    );
  }
}
backend.dispose();

/**
 * What kiln's `auto` policy adds to a model's run, free of the host's speed phases: `auto` and
 * `wasm` compiled in one process, their runs alternating (600 each, the first 100 not timed).
 * The models benchmark runs each in processes of their own, where one process can run twice as
 * fast as the next for a sub-millisecond model (`bench/REPORT-models.md`), so its "auto ÷ best
 * kiln" column compares plans across those phases.
 *
 *   deno run -A bench/auto_pair.ts [MODEL...]   (names of `../shared/models/` or `onnx/testdata/`;
 *                                              default: all of them)
 *
 * @module
 */
import { type Executable, explain, OnnxModel } from "../mod.ts";
import { EXPORT_NAMES, MODEL_NAMES, namedModel } from "../onnx/testdata.ts";
import { median } from "./timed.ts";

/** The backends of `exe`'s kernels, in order. */
async function plan(exe: Executable): Promise<string> {
  return (await explain(exe)).kernels.map((k) => k.backend).join(" ");
}

for (const name of Deno.args.length ? Deno.args : [...MODEL_NAMES, ...EXPORT_NAMES]) {
  const m = await namedModel(name);
  const shapes = Object.fromEntries(Object.entries(m.inputs).map(([k, t]) => [k, t.shape]));
  const model = OnnxModel.fromBytes(m.bytes);
  const auto = await model.compile(shapes, { cache: false });
  const wasm = await model.compile(shapes, { backend: "wasm", cache: false });
  const times: [number[], number[]] = [[], []];
  for (let i = 0; i < 600; i++) {
    for (const [j, exe] of [auto, wasm].entries()) {
      const start = performance.now();
      await exe.run(m.inputs);
      if (i >= 100) times[j].push(performance.now() - start);
    }
  }
  const [a, w] = times.map(median);
  console.log(
    `${name.padEnd(20)} auto ${a.toFixed(4)} ms, wasm ${w.toFixed(4)} ms, auto ÷ wasm ${
      (a / w).toFixed(3)
    }, same plan: ${(await plan(auto)) === (await plan(wasm))}`,
  );
}

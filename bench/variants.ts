/**
 * A/B of compiles of one model in one process: each variant compiled under its own environment
 * settings (a kiln switch, another precision, another model file), then their warm runs
 * interleaved in rounds, so that every variant meets the same GPU clock. On the H200 the clock
 * moves between processes and calls by more than most changes gain (`REPORT-gpu.md`, sessions
 * 63-68), which one process a runner cannot tell from the change.
 *
 *   deno run -A --config deno.json bench/variants.ts MODEL.onnx [--precision f16] \
 *     NAME[:KEY=VALUE,KEY=VALUE] ...
 *
 * Each variant's settings are set while it compiles and its first run executes, then removed.
 * Two keys are the tool's own: `PRECISION` (that variant's precision, default `--precision`'s
 * or f32) and `MODEL` (another model file, compiled with its own inputs: a quantized export
 * beside its f32 form). Runs on Dawn (`--gpu dawn`'s WebGPU), kernel cache off. Prints each
 * variant's kernel count and first values (to see that the variants agree), then `ROUNDS`
 * (environment, default 5) rounds of the median of 40 warm runs each, after 2 s of runs of all.
 * Inputs come from `MODEL.in.NAME.DTYPE.bin` files beside the model where there are, else zeros.
 *
 *   deno run -A --config deno.json bench/variants.ts resnet50_b8.onnx --precision f16 \
 *     f16 f32:PRECISION=f32
 *   deno run -A --config deno.json bench/variants.ts bert_int8.onnx int8 f32:MODEL=bert.onnx
 *
 * @module
 */
import { OnnxModel, type Precision, WebGpuBackend } from "../mod.ts";
import { madeInputs } from "./model_inputs.ts";
import { median, wallTimes } from "./timed.ts";

const args = [...Deno.args];
const at = args.indexOf("--precision");
const precision = (at >= 0 ? args.splice(at, 2)[1] : "f32") as Precision;
const [path, ...specs] = args;
if (!path || specs.length === 0) {
  throw new Error("usage: bench/variants.ts MODEL.onnx [--precision P] NAME[:KEY=VALUE,...] ...");
}
const rounds = Number(Deno.env.get("ROUNDS") ?? 5);

/** The input files beside `model` (`STEM.in.NAME.DTYPE.bin`), by input name. */
function filesOf(model: string): Record<string, string> {
  const dir = model.replace(/[^/]*$/, "") || "./";
  const stem = model.split("/").pop()!.replace(/\.onnx$/, "");
  const files: Record<string, string> = {};
  for (const f of Deno.readDirSync(dir)) {
    const m = f.name.startsWith(`${stem}.in.`) ? f.name.slice(stem.length + 4).split(".") : [];
    if (m.length === 3) files[m[0]] = dir + f.name;
  }
  return files;
}

const backend = new WebGpuBackend({ gpu: "dawn" });
const variants = [];
for (const spec of specs) {
  const [name, env = ""] = spec.split(":");
  const pairs = env.split(",").filter(Boolean).map((p) => p.split("=") as [string, string]);
  const own = new Map(pairs);
  for (const [k, v] of pairs) Deno.env.set(k, v);
  const started = performance.now();
  const file = own.get("MODEL") ?? path;
  const model = await OnnxModel.load(file);
  const inputs = await madeInputs(model.inputs, { files: filesOf(file) });
  const compiled = await model.compileFor(inputs, {
    backend,
    cache: false,
    precision: (own.get("PRECISION") ?? precision) as Precision,
  });
  const out = await compiled.executable.run(compiled.inputs);
  for (const [k] of pairs) Deno.env.delete(k);
  const first = Object.values(out)[0] as { data: ArrayLike<number | bigint> };
  console.log(
    `${name}: compiled in ${(performance.now() - started).toFixed(0)} ms, ` +
      `${compiled.executable.plan?.kernels.length} kernels, first values ${
        JSON.stringify(Array.from(first.data, Number).slice(0, 4))
      }`,
  );
  variants.push({ name, ...compiled });
}
for (const start = performance.now(); performance.now() - start < 2000;) {
  for (const v of variants) await v.executable.run(v.inputs);
}
const medians = new Map<string, number[]>(variants.map((v) => [v.name, []]));
for (let r = 0; r < rounds; r++) {
  for (const v of variants) {
    medians.get(v.name)!.push(median(await wallTimes(() => v.executable.run(v.inputs), 40)));
  }
}
const model = path.split("/").pop();
for (const [name, ms] of medians) {
  const each = ms.map((m) => m.toFixed(2)).join(" ");
  console.log(`${model} ${name}: ${each}, median ${median(ms).toFixed(2)} ms`);
}
backend.dispose();

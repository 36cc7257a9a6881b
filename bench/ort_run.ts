/**
 * ONNX Runtime Web (wasm) on one model with its inputs from files, the peer of `kiln run` in the
 * CPU comparisons of `bench/REPORT-models.md`: session creation, first run, and the median of
 * the timed runs after three warm-ups, as JSON.
 *
 *   deno run -A --config bench/deno.json bench/ort_run.ts MODEL.onnx --input NAME=FILE.DTYPE.bin
 *     [--runs 10] [--threads N] [--save FILE]   (threads: default the machine's cores, as kiln's
 *     wasm backend; FILE: the first output, raw f32)
 *
 * @module
 */
import { parseArgs } from "node:util";

// deno-lint-ignore no-explicit-any
type Any = any;

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: {
    input: { type: "string", multiple: true, default: [] },
    runs: { type: "string", default: "10" },
    threads: { type: "string" },
    save: { type: "string" },
  },
  allowPositionals: true,
});
const path = positionals[0];
if (!path) throw new Error("usage: bench/ort_run.ts MODEL.onnx --input NAME=FILE.DTYPE.bin ...");
const ort: Any = await import("npm:onnxruntime-web@1.30.0");
ort.env.wasm.numThreads = Number(values.threads ?? navigator.hardwareConcurrency);
const t0 = performance.now();
const session = await ort.InferenceSession.create(await Deno.readFile(path));
const created = performance.now() - t0;
const feeds: Record<string, Any> = {};
for (const spec of values.input) {
  const [name, file] = spec.split("=");
  const bytes = await Deno.readFile(file);
  const dtype = file.split(".").at(-2);
  const data = dtype === "int64" ? new BigInt64Array(bytes.buffer) : new Float32Array(bytes.buffer);
  const info = session.inputMetadata?.find?.((m: Any) => m.name === name);
  const shape = info?.shape ?? [1, data.length];
  feeds[name] = new ort.Tensor(dtype === "int64" ? "int64" : "float32", data, shape);
}
const t1 = performance.now();
const result = await session.run(feeds);
const first = performance.now() - t1;
// A checksum of the first output, to hold against kiln's (`kiln run --save`).
const y = result[session.outputNames[0]].data as Float32Array;
const checksum = y.reduce((s, v) => s + v, 0);
// `--save FILE`: the first output's values, raw f32, to hold against kiln's element by element.
if (values.save) await Deno.writeFile(values.save, new Uint8Array(Float32Array.from(y).buffer));
const absSum = y.reduce((s, v) => s + Math.abs(v), 0);
for (let i = 0; i < 3; i++) await session.run(feeds);
const times: number[] = [];
for (let i = 0; i < Number(values.runs); i++) {
  const s = performance.now();
  await session.run(feeds);
  times.push(performance.now() - s);
}
times.sort((a, b) => a - b);
const median = times[times.length >> 1];
console.log(
  JSON.stringify({
    runner: "ort-web-wasm",
    threads: ort.env.wasm.numThreads,
    created,
    first,
    median,
    min: times[0],
    checksum,
    absSum,
    head: [...y.slice(0, 4)],
  }),
);
Deno.exit(0);

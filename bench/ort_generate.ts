/**
 * The peer of `bench/generate.ts`: ONNX Runtime Web's greedy generation over the same decoder and
 * the same seeded prompt, written as its users write the loop (transformers.js's, without its
 * tokenizer): prefill with an empty past, then one token a step, each step's presents fed back as
 * the next past and the next id the argmax of the last logits. One JSON line, for a process's
 * first generation (session creation apart) and a warm one after it:
 *
 *   deno run -A --config deno.json bench/ort_generate.ts MODEL.onnx [--ep wasm|webgpu] \
 *     [--prompt 128] [--new 32] [--vocab 1000]
 *
 * wasm runs as many threads as the machine has cores; webgpu one (its build spawns threads from
 * blob URLs, which Deno cannot load), with the caches read back and fed again every step (ONNX
 * Runtime's tensors on the host; transformers.js keeps them on the GPU with `gpu-buffer` outputs).
 */
import { parseArgs } from "node:util";
import { OnnxModel } from "../mod.ts";
import { seededPrompt } from "./prompt.ts";
import { decodeModel } from "../onnx/wire/proto.ts";

// deno-lint-ignore no-explicit-any
type Any = any;

const { values, positionals } = parseArgs({
  args: Deno.args,
  options: {
    ep: { type: "string", default: "wasm" },
    prompt: { type: "string", default: "128" },
    new: { type: "string", default: "32" },
    vocab: { type: "string", default: "1000" },
  },
  allowPositionals: true,
});
const path = positionals[0];
if (!path) throw new Error("usage: bench/ort_generate.ts MODEL.onnx [--ep wasm|webgpu] ...");
const prompt = seededPrompt(Number(values.prompt), Number(values.vocab));
const webgpu = values.ep === "webgpu";
const ort: Any = webgpu
  ? await import("npm:onnxruntime-web@1.30.0/webgpu")
  : await import("npm:onnxruntime-web@1.30.0");
ort.env.wasm.numThreads = webgpu ? 1 : navigator.hardwareConcurrency;

// The caches' shapes from the model's declarations: [batch, heads, past, head size].
const declared = await OnnxModel.load(path);
const pasts = declared.inputs.filter((i) => i.name.startsWith("past_key_values."));
const names = new Set(declared.inputs.map((i) => i.name));
declared.dispose();
// The model as bytes with its external data files (the webgpu build reads a path as a URL).
const bytes = await Deno.readFile(path);
const locations = new Set(
  decodeModel(bytes).graph.initializer.flatMap((t) =>
    (t.externalData ?? []).flatMap((e) => {
      const { key, value } = e as { key?: string; value?: string };
      return key === "location" && value ? [value] : [];
    })
  ),
);
const folder = path.slice(0, path.lastIndexOf("/") + 1);
const externalData = await Promise.all(
  [...locations].map(async (at) => ({ path: at, data: await Deno.readFile(folder + at) })),
);
const t0 = performance.now();
const session = await ort.InferenceSession.create(bytes, {
  executionProviders: [values.ep],
  externalData,
});
const sessionMs = performance.now() - t0;

const int64 = (xs: number[]) =>
  new ort.Tensor("int64", BigInt64Array.from(xs, BigInt), [1, xs.length]);

/** Feeds for `ids` after `past` tokens, with the caches `cache`. */
function feeds(ids: number[], past: number, cache: Record<string, Any>): Record<string, Any> {
  const f: Record<string, Any> = { input_ids: int64(ids), ...cache };
  const total = past + ids.length;
  if (names.has("attention_mask")) f.attention_mask = int64(Array(total).fill(1));
  if (names.has("position_ids")) f.position_ids = int64(ids.map((_, i) => past + i));
  return f;
}

/** The argmax of the last row of `logits` [1, seq, vocab]. */
function lastArgmax(logits: Any): number {
  const [, seq, vocab] = logits.dims, data = logits.data as Float32Array;
  let best = 0;
  for (let i = 1; i < vocab; i++) {
    if (data[(seq - 1) * vocab + i] > data[(seq - 1) * vocab + best]) best = i;
  }
  return best;
}

/** One greedy generation: its first ids and timings. */
async function generate() {
  let cache: Record<string, Any> = Object.fromEntries(pasts.map((p) => {
    const [batch, heads, , size] = p.dims.map((d) => (typeof d === "number" ? d : 1));
    return [p.name, new ort.Tensor("float32", new Float32Array(0), [batch, heads, 0, size])];
  }));
  const ids: number[] = [];
  const step = async (input: number[], past: number) => {
    const out = await session.run(feeds(input, past, cache));
    cache = Object.fromEntries(
      pasts.map((p) => [p.name, out[p.name.replace("past_key_values", "present")]]),
    );
    ids.push(lastArgmax(out.logits));
  };
  const t1 = performance.now();
  await step(prompt, 0);
  const prefillMs = performance.now() - t1;
  const t2 = performance.now();
  for (let t = 1; t < Number(values.new); t++) await step([ids.at(-1)!], prompt.length + t - 1);
  const decodeMs = performance.now() - t2;
  return {
    ids: ids.slice(0, 8),
    prefillMs,
    decodeMs,
    decodeTokensPerSecond: (Number(values.new) - 1) / (decodeMs / 1000),
  };
}

const first = await generate();
const warm = await generate();
console.log(
  JSON.stringify({ model: path, runner: `ort-web ${values.ep}`, sessionMs, first, warm }),
);

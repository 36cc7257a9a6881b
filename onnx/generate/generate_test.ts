/**
 * Generation against ONNX Runtime: small decoders exported on the GPU machine
 * (`bench/export_decoders.py`: onnxruntime-genai's layout with GroupQueryAttention and 4-bit
 * MatMulNBits, of `accuracy_level` 0 and 4 (A rounded to 8 bits a block: the genai builder's
 * default for CPU and WebGPU models), and a plain torch.onnx.export decoder that appends to its
 * past) with ONNX Runtime's greedy continuation of a prompt recorded beside them; kiln must give
 * the same ids, compiling prefill once and decode once, with no cache byte read back between
 * steps.
 */
import assert from "node:assert/strict";
import { generate, KilnError, OnnxModel, stats, WasmBackend, WebGpuBackend } from "../../mod.ts";
import { decodeModel, encodeModel, type NodeProto } from "../wire/proto.ts";
import { referenceModel } from "../testdata.ts";

const DIR = new URL("../testdata/decoders/", import.meta.url);
const recorded: Record<string, { prompt: number[]; greedy: number[] }> = JSON.parse(
  await Deno.readTextFile(new URL("decoders.json", DIR)),
);
const load = (name: string) => OnnxModel.load(new URL(`${name}.onnx`, DIR));
const typed = (pattern: RegExp) => (e: unknown) =>
  e instanceof KilnError && pattern.test(e.message) && /Fix:/.test(e.message);

for (const name of ["genai_tiny", "genai_tiny_level4", "torch_tiny"]) {
  for (const backend of ["reference", "wasm", "webgpu"]) {
    Deno.test(`generate: ${name} greedy on ${backend} gives ONNX Runtime's ids`, async () => {
      const { prompt, greedy } = recorded[name];
      // The software adapter in CI and the reference interpreter are slow: fewer tokens there.
      const n = backend === "wasm" ? greedy.length : backend === "webgpu" ? 5 : 10;
      const g = generate(await load(name), prompt, { maxNewTokens: n, backend });
      assert.deepEqual(await g.collect(), greedy.slice(0, n));
      const s = g.stats!;
      assert.equal(s.layout, name.startsWith("genai_tiny") ? "packed" : "appended");
      // Prefill once, decode once: never a compile per step.
      assert.equal(s.executables, 2);
      assert.equal(s.newTokens, n);
      assert.equal(s.capacity, 64);
      // The decode step stores every cache over its past (donated), wherever it runs one.
      const stored = g.executables.at(-1)!.plan?.kernels.flatMap((k) => k.inPlace ?? []) ?? [];
      if (backend !== "reference") assert.equal(stored.length, 4, "two layers' keys and values");
    });
  }
}

Deno.test("generate: f16 decoders (every float tensor f16, as fp16 and q4f16 exports carry theirs) give ONNX Runtime's ids of their f32 form", async () => {
  const { AS_HALF, asForm } = await import("../../tools/conformance/conformance_forms.ts");
  for (const name of ["genai_tiny", "torch_tiny"]) {
    const { prompt, greedy } = recorded[name];
    const bytes = await Deno.readFile(new URL(`${name}.onnx`, DIR));
    const half = OnnxModel.fromBytes(encodeModel(asForm(decodeModel(bytes), AS_HALF)!));
    // The caches, the logits and the weights are f16: a generation reads and writes them so.
    assert.ok(half.inputs.some((i) => i.dtype === "f16"), name);
    for (const backend of ["reference", "wasm", "webgpu"]) {
      const n = backend === "wasm" ? 8 : 4;
      const g = generate(half, prompt, { maxNewTokens: n, backend, cache: false });
      // These models' logits stay apart by more than f16 rounds: the same ids.
      assert.deepEqual(await g.collect(), greedy.slice(0, n), `${name} on ${backend}`);
      assert.equal(g.stats!.executables, 2);
    }
  }
});

Deno.test("generate: a generation names the executables it ran, to profile kernel by kernel", async () => {
  const { prompt, greedy } = recorded.genai_tiny;
  const backend = new WasmBackend({ profile: true });
  const g = generate(await load("genai_tiny"), prompt, { maxNewTokens: 4, backend, cache: false });
  assert.equal(g.executables.length, 0);
  assert.deepEqual(await g.collect(), greedy.slice(0, 4));
  // Prefill first, then the decode step, whose last run is timed kernel by kernel.
  const [prefill, decode] = g.executables;
  assert.equal(g.executables.length, 2);
  assert.ok(prefill.graph.inputs[0].shape.includes(prompt.length), "prefill takes the prompt");
  const times = decode.deviceTimes();
  assert.ok(times.length > 0 && times.every((t) => t.ms >= 0 && t.kernel.length > 0));
  backend.dispose();
});

Deno.test("generate: on webgpu a prefill of many rows and the decode step upload the weights once", async () => {
  // A prompt of 7 rows takes the products' generic form, which reads the packed words and scales
  // through reshapes (other arrays over the same bytes): they went up a second time (167 KB
  // resident against 114 KB).
  const { prompt } = recorded.genai_tiny;
  const resident = async (ids: number[]) => {
    const gpu = new WebGpuBackend();
    await generate(await load("genai_tiny"), ids, { maxNewTokens: 2, backend: gpu, cache: false })
      .collect();
    const bytes = gpu.poolStats().residentBytes;
    gpu.dispose();
    return bytes;
  };
  const fewRows = await resident(prompt.slice(0, 1)), manyRows = await resident(prompt);
  assert.ok(manyRows < fewRows * 1.05, `${manyRows} bytes resident against ${fewRows}`);
});

Deno.test("generate: on webgpu the decode step warms up in the first generation only", async () => {
  const { prompt } = recorded.genai_tiny;
  const model = await load("genai_tiny");
  const gpu = new WebGpuBackend();
  const runs = async () => {
    const before = stats().kiln_runs_total;
    await generate(model, prompt, { maxNewTokens: 4, backend: gpu, cache: false }).collect();
    return stats().kiln_runs_total - before;
  };
  const first = await runs(), second = await runs();
  // Prefill and three decode steps, and in the first generation a run on zeros before them.
  assert.deepEqual([first, second], [5, 4]);
  gpu.dispose();
});

Deno.test("generate: on webgpu a decode layer's queries are computed inside its attention, the checks in the mask's kernels", async () => {
  const { prompt, greedy } = recorded.genai_tiny_level4;
  const gpu = new WebGpuBackend({ profile: true });
  await gpu.prepare();
  const g = generate(await load("genai_tiny_level4"), prompt, {
    maxNewTokens: 3,
    backend: gpu,
    cache: false,
  });
  assert.deepEqual(await g.collect(), greedy.slice(0, 3));
  // Kernel times need timestamp queries (Dawn's GL backend has none).
  if (gpu.capabilities().timestampQuery) {
    const names = g.executables.at(-1)!.deviceTimes().map((t) => t.kernel);
    // Each of the two layers: its keys' and values' cache write the one elementwise kernel (the
    // queries' rotation runs in the attention), then the attention over 64 keys in two splits.
    assert.equal(names.filter((n) => n.startsWith("elementwise")).length, 2, names.join(" "));
    assert.equal(names.filter((n) => n.endsWith("_partials")).length, 2, names.join(" "));
    // The step's reductions: the mask's sum with its checks in one kernel (each int64 check of
    // one value read as it is, the f32 shadow summed beside the sum), the ids' ArgMax.
    assert.equal(names.filter((n) => n.startsWith("reduce")).length, 2, names.join(" "));
  }
  gpu.dispose();
});

Deno.test("generate: on webgpu the caches stay on the device; a step reads back its id", async () => {
  const { prompt, greedy } = recorded.torch_tiny;
  const model = await load("torch_tiny");
  const before = stats().kiln_bytes_downloaded_total;
  const ids: number[] = [];
  for await (const id of generate(model, prompt, { maxNewTokens: 6, backend: "webgpu" })) {
    ids.push(id);
  }
  assert.deepEqual(ids, greedy.slice(0, 6));
  // Each step's greedy id is one 32-bit word; the caches (2 layers x 2 x 4 heads x 64 x 16
  // floats) never come back.
  assert.equal(stats().kiln_bytes_downloaded_total - before, 6 * 4);
});

Deno.test("generate: on wasm the caches stay in the arena; a step's host bytes are its feeds and id", async () => {
  const { prompt, greedy } = recorded.torch_tiny;
  const model = await load("torch_tiny");
  const ids: number[] = [];
  let before = 0;
  const backend = new WasmBackend({ threads: 1 });
  for await (const id of generate(model, prompt, { maxNewTokens: 6, backend })) {
    // From the first token on (prefill's): the decode step's warm-up ran on its weights, so its
    // first run writes none (on zero weights it wrote them all: 140-170 ms of a 0.5B decoder's
    // first decode step on the 16-core host).
    if (ids.push(id) === 1) before = stats().kiln_wasm_host_bytes_total;
  }
  assert.deepEqual(ids, greedy.slice(0, 6));
  // One cache is 4 heads x 64 positions x 16 floats (16 KB); through the host, each step moved
  // all eight in and out. Now a step's ids, positions, mask and slots go in (about 540 bytes).
  const perStep = (stats().kiln_wasm_host_bytes_total - before) / 5;
  assert.ok(perStep > 0 && perStep < 1024, `${perStep} bytes a step`);
});

// The genai layout's weights are blocks its products read where they lie; torch_tiny's f32 products
// read theirs as panels each program packs for its own kernels, so only those programs' other
// weights are shared.
for (const name of ["genai_tiny", "genai_tiny_level4"] as const) {
  Deno.test(`generate: on wasm ${name}'s prefill and decode step hold its weights once`, async () => {
    const { prompt, greedy } = recorded[name];
    const model = await load(name);
    const file = (await Deno.stat(new URL(`${name}.onnx`, DIR))).size;
    const before = stats().kiln_wasm_weight_bytes_total;
    const g = generate(model, prompt, {
      maxNewTokens: 3,
      backend: new WasmBackend({ threads: 1 }),
    });
    assert.deepEqual(await g.collect(), greedy.slice(0, 3));
    // Prefill writes the weights (most of the file) into the memory; the decode step, its warm-up
    // included, reads them where prefill wrote them (written into an arena of its own: twice).
    const written = stats().kiln_wasm_weight_bytes_total - before;
    assert.ok(written < 1.3 * file, `${written} bytes of weights written for a ${file}-byte model`);
  });
}

for (const name of ["genai_tiny", "torch_tiny"] as const) {
  Deno.test(`generate: ${name}'s decode step stores each next cache over its past`, async () => {
    const { prompt, greedy } = recorded[name];
    const model = await load(name);
    const backend = new WasmBackend({ threads: 1 });
    const g = generate(model, prompt, { maxNewTokens: 6, backend });
    assert.deepEqual(await g.collect(), greedy.slice(0, 6));
    const decode = g.executables.at(-1)!;
    const pairs = decode.plan!.kernels.flatMap((k) => k.inPlace ?? []);
    const caches = decode.graph.inputs.filter((i) => i.name.startsWith("past_key_values"));
    assert.equal(pairs.length, caches.length);
  });
}

Deno.test("generate: on webgpu greedy steps start two ahead of the token read; stopping leaves nothing behind", async () => {
  const { prompt, greedy } = recorded.genai_tiny;
  const model = await load("genai_tiny");
  const gpu = new WebGpuBackend();
  const options = { backend: gpu, cache: false as const };
  // One token: nothing to start after it.
  await generate(model, prompt, { ...options, maxNewTokens: 1 }).collect();
  const held = gpu.poolStats().inUseBytes;
  const runs = stats().kiln_runs_total;
  await generate(model, prompt, { ...options, maxNewTokens: 1 }).collect();
  const single = stats().kiln_runs_total - runs;
  // At the first token of a longer generation, its first two decode steps are already
  // running; at the next, the third.
  const before = stats().kiln_runs_total;
  let seen = 0;
  for await (const id of generate(model, prompt, { ...options, maxNewTokens: 5 })) {
    assert.equal(id, greedy[seen]);
    assert.equal(stats().kiln_runs_total - before, single + 2 + seen);
    if (++seen === 2) break;
  }
  // Never past the tokens asked for: two tokens, one decode step.
  const two = stats().kiln_runs_total;
  await generate(model, prompt, { ...options, maxNewTokens: 2 }).collect();
  assert.equal(stats().kiln_runs_total - two, single + 1);
  // A stop id ends it with the step after it run out and let go, as the early break did.
  const stop = await generate(model, prompt, { ...options, maxNewTokens: 4, stopIds: [greedy[1]] })
    .collect();
  assert.deepEqual(stop, greedy.slice(0, 2));
  assert.equal(gpu.poolStats().inUseBytes, held);
  gpu.dispose();
});

Deno.test("generate: sampling among the top k reads back 2k numbers a step, not the logits", async () => {
  const { prompt } = recorded.torch_tiny;
  const model = await load("torch_tiny");
  const options = { maxNewTokens: 4, temperature: 1, topK: 8, seed: 3 };
  const want = await generate(model, prompt, { ...options, backend: "wasm" }).collect();
  const before = stats().kiln_bytes_downloaded_total;
  const got = await generate(model, prompt, { ...options, backend: "webgpu" }).collect();
  assert.deepEqual(got, want);
  // Each step: 8 values and 8 ids of 4 bytes; the 128 logits never come back.
  assert.equal(stats().kiln_bytes_downloaded_total - before, 4 * 8 * 8);
});

Deno.test("generate: sampling repeats with its seed, on every backend", async () => {
  const model = await load("torch_tiny");
  const { prompt } = recorded.torch_tiny;
  const options = { maxNewTokens: 8, temperature: 1.5, topK: 40, topP: 0.95, seed: 7 };
  const first = await generate(model, prompt, { ...options, backend: "wasm" }).collect();
  assert.deepEqual(await generate(model, prompt, { ...options, backend: "wasm" }).collect(), first);
  assert.deepEqual(
    await generate(model, prompt, { ...options, backend: "reference" }).collect(),
    first,
  );
  const other = await generate(model, prompt, { ...options, seed: 8, backend: "wasm" }).collect();
  assert.notDeepEqual(other, first);
  // A stop id ends the generation once it is yielded.
  const stopped = await generate(model, prompt, {
    ...options,
    backend: "wasm",
    stopIds: [first[2]],
  }).collect();
  assert.deepEqual(stopped, first.slice(0, first.indexOf(first[2]) + 1));
});

/**
 * torch_tiny without its position_ids input: positions counted from the past's length inside
 * the graph, as exports that take no positions do. Padding cannot be told apart there, so the
 * loop feeds each step the exact past.
 */
function withoutPositions(bytes: Uint8Array): OnnxModel {
  const proto = decodeModel(bytes);
  const g = proto.graph;
  g.input = g.input.filter((i) => i.name !== "position_ids");
  const node = (opType: string, input: string[], output: string, attribute = []): NodeProto => ({
    opType,
    input,
    output: [output],
    attribute,
  });
  const past = g.input.find((i) => i.name.startsWith("past"))!.name;
  g.initializer.push(
    { name: "pos.two", dims: [1], dataType: 7, rawData: new Uint8Array([2, 0, 0, 0, 0, 0, 0, 0]) },
    { name: "pos.one", dims: [1], dataType: 7, rawData: new Uint8Array([1, 0, 0, 0, 0, 0, 0, 0]) },
    {
      name: "pos.three",
      dims: [1],
      dataType: 7,
      rawData: new Uint8Array([3, 0, 0, 0, 0, 0, 0, 0]),
    },
  );
  g.node.unshift(
    node("Shape", [past], "pos.past_shape"),
    node("Slice", ["pos.past_shape", "pos.two", "pos.three"], "pos.past_len"),
    node("Shape", ["input_ids"], "pos.ids_shape"),
    node("Slice", ["pos.ids_shape", "pos.one", "pos.two"], "pos.s"),
    node("Add", ["pos.past_len", "pos.s"], "pos.end"),
    node("Squeeze", ["pos.past_len"], "pos.start0"),
    node("Squeeze", ["pos.end"], "pos.end0"),
    node("Squeeze", ["pos.one"], "pos.step"),
    node("Range", ["pos.start0", "pos.end0", "pos.step"], "pos.range"),
    node("Unsqueeze", ["pos.range", "pos.zero_axis"], "position_ids"),
  );
  g.initializer.push({
    name: "pos.zero_axis",
    dims: [1],
    dataType: 7,
    rawData: new Uint8Array(8),
  });
  return OnnxModel.fromBytes(encodeModel(proto));
}

Deno.test("generate: a decoder that cannot mask padding gets the exact past each step", async () => {
  const { prompt, greedy } = recorded.torch_tiny;
  const bytes = await Deno.readFile(new URL("torch_tiny.onnx", DIR));
  const g = generate(withoutPositions(bytes), prompt, { maxNewTokens: 5, backend: "wasm" });
  assert.deepEqual(await g.collect(), greedy.slice(0, 5));
  assert.equal(g.stats!.layout, "exact");
  assert.equal(g.stats!.capacity, undefined);
});

/**
 * genai_tiny deepened to `layers` layers (layer 1's nodes repeated with its weights, each new
 * layer with its own cache): the layout of a 24-layer model, where every layer reads the
 * attention mask's sums.
 */
function deepened(bytes: Uint8Array, layers: number): OnnxModel {
  const proto = decodeModel(bytes);
  const g = proto.graph;
  const weights = new Set(g.initializer.map((t) => t.name));
  const own = (n: NodeProto) => n.output.some((o) => /^(l1\.|present\.1\.)/.test(o));
  const layer = g.node.filter(own);
  const after = g.node.filter((n) => !own(n) && n.input.some((i) => i.startsWith("l1.")));
  const renamed = (k: number) => (name: string) =>
    weights.has(name) ? name : name.replace(/^l1\./, `l${k}.`).replace(/^l0\./, `l${k - 1}.`)
      .replace(/^(past_key_values|present)\.1\./, `$1.${k}.`);
  for (let k = 2; k < layers; k++) {
    const r = renamed(k);
    const copies = layer.map((n) => ({
      ...n,
      name: r(n.name ?? ""),
      input: n.input.map(r),
      output: n.output.map(r),
    }));
    g.node.splice(g.node.indexOf(after[0]), 0, ...copies);
    for (const kind of ["key", "value"]) {
      g.input.push({
        ...g.input.find((v) => v.name === `past_key_values.1.${kind}`)!,
        name: `past_key_values.${k}.${kind}`,
      });
      g.output.push({
        ...g.output.find((v) => v.name === `present.1.${kind}`)!,
        name: `present.${k}.${kind}`,
      });
    }
  }
  for (const n of after) n.input = n.input.map((i) => i.replace(/^l1\./, `l${layers - 1}.`));
  return OnnxModel.fromBytes(encodeModel(proto));
}

Deno.test("generate: a 24-layer decoder runs on the software adapter within its binding limit", async () => {
  const bytes = await Deno.readFile(new URL("genai_tiny.onnx", DIR));
  const model = deepened(bytes, 24);
  const want = await generate(model, [3, 17, 42], { maxNewTokens: 3, backend: "wasm" }).collect();
  // Every layer casts the mask's sum: fused, that one reduction stored 100 buffers, past the
  // adapter's 16 storage buffers a stage.
  const got = await generate(model, [3, 17, 42], { maxNewTokens: 3, backend: "webgpu" }).collect();
  assert.deepEqual(got, want);
});

Deno.test("generate: what is not a decoder, and bad options, are typed errors", async () => {
  const mlp = await referenceModel("mlp");
  assert.throws(() => generate(OnnxModel.fromBytes(mlp.bytes), [1]), typed(/not a decoder/));
  const model = await load("torch_tiny");
  const bad: [number[], Record<string, unknown>, RegExp][] = [
    [[], {}, /no token ids/],
    [[1, -2], {}, /not a token id/],
    [[1.5], {}, /not a token id/],
    [[1], { maxNewTokens: 0 }, /maxNewTokens/],
    [[1], { temperature: -1 }, /temperature/],
    [[1], { temperature: NaN }, /temperature/],
    [[1], { topK: 0 }, /topK/],
    [[1], { topP: 0 }, /topP/],
    [[1], { topP: 1.5 }, /topP/],
    [[1], { seed: 0.5 }, /seed/],
    [[1, 2, 3], { maxNewTokens: 8, capacity: 4 }, /capacity/],
    [[500], {}, /not a token id of this model.*vocabulary of 128/],
    [[1], { stopIds: [1.5] }, /Stop id 1.5/],
    // Not lists: a TypeError from inside (stopIds.find) before.
    [[1], { stopIds: 2 }, /stopIds is 2, not a list/],
    // Strings: topP "0.9" had passed its range check by coercion; the others read as numbers.
    [[1], { topP: "0.9" }, /topP "0.9" is not in/],
    [[1], { temperature: "0.5" }, /temperature "0.5" is not/],
    [[1], { capacity: "64" }, /capacity "64" is not a whole number/],
    [[1], { maxNewTokens: "2" }, /maxNewTokens "2" is not/],
    ["1,2" as unknown as number[], {}, /prompt is "1,2", not a list/],
    [[1], { capacity: 1e12 }, /over the memory budget|elements/],
    // The model's position tables have 256 rows: 7 prompt tokens leave room for 250 new ones.
    [[1, 2, 3, 4, 5, 6, 7], { maxNewTokens: 251 }, /need 257 positions.*have 256.*at most 250/],
    [Array(300).fill(1), {}, /position tables have 256.*shorten the prompt to at most 256/],
    [Array(256).fill(1), { maxNewTokens: 2 }, /need 257 positions.*at most 1 new/],
  ];
  for (const [prompt, options, pattern] of bad) {
    assert.throws(() => generate(model, prompt, options), typed(pattern), pattern.source);
  }
  const options = null as unknown as Record<string, unknown>;
  assert.throws(() => generate(model, [1], options), typed(/takes an object of options, got null/));
  // A misspelt key had generated the default 32 tokens without a word.
  const misspelt = { maxNewToken: 2 } as Record<string, unknown>;
  assert.throws(() => generate(model, [1], misspelt), typed(/no option "maxNewToken"/));
  const path = "model.onnx" as unknown as OnnxModel;
  assert.throws(() => generate(path, [1]), typed(/takes an OnnxModel first/));
  // At the limit, a generation is planned (not run here).
  assert.ok(generate(model, [1, 2, 3, 4, 5, 6, 7], { maxNewTokens: 250 }));
  const g = generate(model, [1], { maxNewTokens: 1, backend: "wasm" });
  await g.collect();
  await assert.rejects(() => g.collect(), typed(/already been iterated/));
});

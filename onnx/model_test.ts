import assert from "node:assert/strict";
import { KilnError, OnnxModel } from "../mod.ts";
import { referenceModel } from "./testdata.ts";
import { decodeModel } from "./wire/proto.ts";

Deno.test("a model made from the caller's bytes keeps its own copy of them", async () => {
  // Decoded tensors are views of the bytes they came from; fromBytes decodes a copy, so the
  // caller may reuse its buffer after the load.
  const m = await referenceModel("lenet");
  const bytes = m.bytes.slice();
  const model = OnnxModel.fromBytes(bytes);
  bytes.fill(0);
  const y = (await model.run({ x: m.x })).y.data as Float32Array;
  assert.deepEqual([...y], [...(await OnnxModel.fromBytes(m.bytes).run({ x: m.x })).y.data]);
  // The decoder itself copies nothing: a tensor's raw data is a view of the message's buffer.
  const raw = decodeModel(m.bytes).graph.initializer.find((t) => t.rawData?.length)!.rawData!;
  assert.equal(raw.buffer, m.bytes.buffer);
});

Deno.test("OnnxModel.load given bytes says to use fromBytes, without printing them", async () => {
  const bytes = new Uint8Array(100_000).fill(7) as unknown as string;
  const error = await OnnxModel.load(bytes).then(() => undefined, (e: Error) => e);
  assert.ok(error instanceof KilnError, String(error));
  assert.match(error.message, /takes a path or a URL, not a Uint8Array/);
  assert.match(error.message, /fromBytes/);
  assert.ok(error.message.length < 400, `${error.message.length} characters`);
});

Deno.test("OnnxModel.fromBytes of something other than bytes is a typed error", () => {
  // A string had read as an empty model, null failed inside.
  for (const bad of ["model.onnx", null, [8, 1]]) {
    assert.throws(
      () => OnnxModel.fromBytes(bad as never),
      (e: unknown) => e instanceof KilnError && /takes the model's bytes/.test(e.message),
    );
  }
});

Deno.test("OnnxModel.load and fromBytes refuse options they do not have", async () => {
  const { bytes } = await referenceModel("lenet");
  const typed = (pattern: RegExp) => (e: unknown) =>
    e instanceof KilnError && e.code === "bad-input" && pattern.test(e.message);
  // A misspelt onProgres had been ignored: no progress, no word.
  const misspelt = { onProgres: () => {} } as never;
  assert.throws(() => OnnxModel.fromBytes(bytes, misspelt), typed(/no option "onProgres"/));
  assert.throws(() => OnnxModel.fromBytes(bytes, { onProgress: 1 as never }), typed(/function/));
  const path = await Deno.makeTempFile({ suffix: ".onnx" });
  await Deno.writeFile(path, bytes);
  await assert.rejects(() => OnnxModel.load(path, 5 as never), typed(/object of options/));
  await Deno.remove(path);
});

Deno.test("input shapes that name no input, or are not shapes, are refused, not ignored", async () => {
  const m = await referenceModel("mlp");
  const model = OnnxModel.fromBytes(m.bytes);
  // Options where the shapes go: ignored, they had compiled on the default backend.
  await assert.rejects(
    () => model.compile({ backend: "reference" } as never),
    (e: unknown) =>
      e instanceof KilnError && /inputShapes names "backend"/.test(e.message) &&
      /compile options second/.test(e.message),
  );
  assert.throws(
    () => model.graph({ X: [8, 784] }),
    (e: unknown) => e instanceof KilnError && /name the model's inputs: "x"/.test(e.message),
  );
  for (const bad of [[8, -784], [8, 784.5], "8,784", [8, NaN]]) {
    assert.throws(
      () => model.graph({ x: bad } as never),
      (e: unknown) => e instanceof KilnError && /is not a shape/.test(e.message),
      String(bad),
    );
  }
  // Not objects: a TypeError from inside (null), or options ignored (a backend's name).
  await assert.rejects(
    () => model.compile(null as never),
    (e: unknown) =>
      e instanceof KilnError && /input shapes are null, not an object/.test(e.message),
  );
  await assert.rejects(
    () => model.compile({}, "wasm" as never),
    (e: unknown) =>
      e instanceof KilnError && /takes an object of options, got "wasm"/.test(e.message),
  );
  // Misspelt options of compile and of run, and run options compileFor does not take.
  const x = { data: new Float32Array(8 * 784), shape: [8, 784], dtype: "f32" as const };
  for (
    const call of [
      () => model.compile({}, { backnd: "wasm" } as never),
      () => model.run({ x }, { output: ["y"] } as never),
      () => model.compileFor({ x }, { outputs: ["y"] } as never),
    ]
  ) {
    await assert.rejects(
      call,
      (e: unknown) => e instanceof KilnError && /no option/.test(e.message),
    );
  }
  // The model's own input, at its declared shape, still compiles.
  using exe = await model.compile({ x: [8, 784] }, { backend: "reference", cache: false });
  assert.ok(exe);
});

Deno.test("compile options that change the executable are part of its cache key", async () => {
  const model = await OnnxModel.load(new URL("testdata/generator.onnx", import.meta.url));
  const name = model.inputs[0].name;
  const plain = await model.compile({}, { backend: "wasm" });
  // One that donates its input writes over it: a caller who did not ask must not get it.
  const donating = await model.compile({}, { backend: "wasm", donate: [name] });
  assert.notEqual(donating, plain);
  assert.equal(await model.compile({}, { backend: "wasm", donate: [name] }), donating);
  const placed = await model.compile({}, { backend: "wasm", inputsOn: { [name]: "wasm" } });
  assert.notEqual(placed, plain);
  const once = await model.compile({}, { backend: "wasm", workload: { runs: 1 } });
  assert.notEqual(once, plain);
  assert.equal(await model.compile({}, { backend: "wasm" }), plain);
  model.dispose();
});

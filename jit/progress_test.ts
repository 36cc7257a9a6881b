import assert from "node:assert/strict";
import { compile, GraphBuilder, OnnxModel, type Progress } from "../mod.ts";
import { referenceModel } from "../onnx/testdata.ts";

Deno.test("compile reports fuse, codegen and pipelines in order, with kernel counts", async () => {
  const b = new GraphBuilder();
  const x = b.input("x", [4, 8]);
  b.output("y", b.op("Softmax", [b.op("Relu", [b.op("MatMul", [x, b.input("w", [8, 8])])])]));
  const seen: Progress[] = [];
  const exe = await compile(b.build(), {
    backend: "wasm",
    cache: false,
    onProgress: (p) => seen.push(p),
  });
  const phases = [...new Set(seen.map((p) => p.phase))];
  assert.deepEqual(phases, ["fuse", "codegen", "pipelines"]);
  const codegen = seen.filter((p) => p.phase === "codegen");
  assert.equal(codegen.at(-1)!.done, codegen.at(-1)!.total);
  assert.equal(codegen.at(-1)!.total, exe.plan!.kernels.length);
  exe.dispose();
});

Deno.test("OnnxModel.load's onProgress sees the import first; a throwing callback fails nothing", async () => {
  const m = await referenceModel("mlp");
  const seen: string[] = [];
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeFile(`${dir}/m.onnx`, m.bytes);
    const model = await OnnxModel.load(`${dir}/m.onnx`, { onProgress: (p) => seen.push(p.phase) });
    await model.run({ x: m.x }, { backend: "wasm", cache: false });
    assert.equal(seen[0], "import");
    assert.ok(seen.includes("pipelines"));
    const angry = OnnxModel.fromBytes(m.bytes, {
      onProgress: () => {
        throw new Error("display broke");
      },
    });
    await angry.run({ x: m.x }, { backend: "wasm", cache: false });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

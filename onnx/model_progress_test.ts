import assert from "node:assert/strict";
import { OnnxModel } from "../mod.ts";
import { referenceModel } from "./testdata.ts";

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

import assert from "node:assert/strict";
import { hostFs } from "./host_fs.ts";

Deno.test("readFile gives a file's bytes in one read of its size, an empty file's none; a directory fails as before", async () => {
  const fs = (await hostFs())!;
  const dir = await Deno.makeTempDir();
  try {
    const data = Uint8Array.from({ length: 300_001 }, (_, i) => (i * 31) & 255);
    await Deno.writeFile(`${dir}/model.onnx`, data);
    assert.deepEqual(await fs.readFile(`${dir}/model.onnx`), data);
    assert.deepEqual(await fs.readFile(new URL(`file://${dir}/model.onnx`)), data);
    await Deno.writeFile(`${dir}/empty`, new Uint8Array());
    assert.equal((await fs.readFile(`${dir}/empty`)).length, 0);
    // Not a regular file: read as Deno reads it (a directory fails as it did).
    await assert.rejects(fs.readFile(dir));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

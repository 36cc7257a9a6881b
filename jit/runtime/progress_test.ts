import assert from "node:assert/strict";
import { compile, GraphBuilder, type Progress } from "../../mod.ts";

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

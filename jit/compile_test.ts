import assert from "node:assert/strict";
import { compile, GraphBuilder, KilnError } from "../mod.ts";
import { fuse } from "./passes/fuse.ts";

Deno.test("compile of fuse()'s plan, or of anything but a graph, is a typed error", async () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Relu", [b.input("x", [4])]));
  const plan = fuse(b.build());
  for (const bad of [plan, undefined, {}, "graph"]) {
    await assert.rejects(
      () => compile(bad as never),
      (e) =>
        e instanceof KilnError && e.code === "bad-input" &&
        /compile\(\) takes a Graph/.test(e.message),
    );
  }
});

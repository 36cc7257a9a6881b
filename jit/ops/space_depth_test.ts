import assert from "node:assert/strict";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { KilnError } from "../support/errors.ts";
import "./mod.ts";

Deno.test("block moves that do not divide their input are typed errors that say what fits", () => {
  const refused = (op: string, shape: number[], fix: RegExp) => {
    const b = new GraphBuilder();
    const y = b.op(op, [b.input("x", shape)], { blocksize: 2 });
    assert.throws(
      () => b.output("y", y).build(),
      (e) => e instanceof KilnError && e.code === "shape-mismatch" && fix.test(e.message),
    );
  };
  refused("DepthToSpace", [1, 6, 2, 2], /multiple of blocksize²/);
  refused("SpaceToDepth", [1, 4, 3, 4], /H and W multiples of blocksize/);
  refused("DepthToSpace", [8, 2, 2], /\[N, C, H, W\]/);
});

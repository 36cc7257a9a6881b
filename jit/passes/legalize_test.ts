/**
 * The passes' own entry points (`fuse`, `legalize`), as the API exports them, refuse what is not
 * a graph, a backend or an options object as typed errors.
 */
import assert from "node:assert/strict";
import { KilnError } from "../support/errors.ts";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import type { Graph } from "../ir/graph.ts";
import type { Backend } from "../runtime/backend.ts";
import { fuse } from "./fuse.ts";
import { legalize } from "./legalize.ts";

const typed = (pattern: RegExp) => (e: unknown) =>
  e instanceof KilnError && e.code === "bad-input" && pattern.test(e.message) &&
  /Fix: \S/.test(e.message);

Deno.test("fuse and legalize refuse what is not a graph, a backend or options, as typed errors", () => {
  const b = new GraphBuilder();
  b.output("y", b.op("Relu", [b.input("x", [2])]));
  const graph = b.build();
  // Each had failed inside as a TypeError (`null.values`, `null.nodes`, `backend.supports`).
  const none = null as unknown as Graph;
  assert.throws(() => fuse(none), typed(/fuse\(\) takes a Graph, got null/));
  const plan = fuse(graph) as unknown as Graph;
  assert.throws(() => fuse(plan), typed(/kernel plan/));
  assert.throws(() => legalize(none, {} as Backend), typed(/legalize\(\) takes a Graph/));
  assert.throws(() => legalize(graph, null as unknown as Backend), typed(/backend second/));
  // A misspelt fusion option had been ignored: keysFom fused as if it were not given.
  const misspelt = { keysFom: 1 } as Record<string, unknown>;
  assert.throws(() => fuse(graph, misspelt), typed(/fuse\(\) has no option "keysFom"/));
  assert.throws(() => fuse(graph, 5 as never), typed(/object of options, got 5/));
  assert.equal(fuse(graph, { keysFrom: 1 }).kernels.length, 1);
});

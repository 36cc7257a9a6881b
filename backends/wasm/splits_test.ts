import * as assert from "node:assert/strict";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import {
  ALL_CORES_SPLIT_WORK,
  ALL_CORES_WORK,
  threadable,
  threadsOfProgram,
  totalWork,
} from "./splits.ts";

/** The kernels of an [m, k] × [k, n] product. */
function product(m: number, k: number, n: number) {
  const b = new GraphBuilder();
  const x = b.input("x", [m, k], "f32");
  const w = b.input("w", [k, n], "f32");
  b.output("y", b.op("MatMul", [x, w]));
  return fuse(b.build()).kernels;
}

Deno.test("only the heaviest programs take every core; others the default share, and one thread stays one", () => {
  const small = product(64, 64, 64);
  const heavy = product(1024, 4096, 4096);
  assert.ok(totalWork(small) < ALL_CORES_WORK && totalWork(heavy) >= ALL_CORES_WORK);
  assert.equal(threadsOfProgram(small, 12, 16), 12);
  assert.equal(threadsOfProgram(heavy, 12, 16), 16);
  assert.equal(threadsOfProgram(heavy, 1, 16), 1, "a backend on one thread stays there");
  assert.equal(threadsOfProgram(heavy, 2, 2), 2);
});

Deno.test("a heavy program of many short split kernels (a decode step) keeps the default share", () => {
  // One long product among many one-row ones: heavy in total, short on average.
  const rows = Array.from({ length: 400 }, () => product(1, 1024, 1024)).flat();
  const kernels = [...product(256, 4096, 4096), ...rows];
  const split = kernels.filter(threadable);
  assert.ok(totalWork(kernels) >= ALL_CORES_WORK);
  assert.ok(totalWork(split) < ALL_CORES_SPLIT_WORK * split.length);
  assert.equal(threadsOfProgram(kernels, 12, 16), 12);
});

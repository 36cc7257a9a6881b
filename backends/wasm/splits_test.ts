import * as assert from "node:assert/strict";
import { GraphBuilder } from "../../jit/frontend/graph_builder.ts";
import { fuse } from "../../jit/passes/fuse.ts";
import { type Expr, rowCount } from "../../jit/ir/kernel_ir.ts";
import { panelSplit } from "../../shaders/wasm/matmul_plan.ts";
import { blockProduct } from "../../jit/testing/block_product.ts";
import { piecesOf } from "./worker_crew.ts";
import { inPlaceKernels } from "../../jit/schedule/in_place.ts";
import {
  ALL_CORES_WORK,
  chainsOf,
  splitsOf,
  threadable,
  threadsOfProgram,
  totalWork,
  workOf,
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

Deno.test("a heavy program of many short split kernels (a decode step) takes every core too", () => {
  // One long product among many one-row ones: heavy in total, short on average.
  const rows = Array.from({ length: 400 }, () => product(1, 1024, 1024)).flat();
  const kernels = [...product(256, 4096, 4096), ...rows];
  assert.ok(totalWork(kernels) >= ALL_CORES_WORK);
  assert.ok(kernels.filter(threadable).length > 400);
  assert.equal(threadsOfProgram(kernels, 12, 16), 16);
});

Deno.test("an attention group splits as one chain: rows of (batch, head, query), members per row", () => {
  const b = new GraphBuilder();
  const [q, k, v] = ["q", "k", "v"].map((n) => b.input(n, [2, 4, 64, 32], "f32"));
  const scores = b.op("Mul", [
    b.op("MatMul", [q, b.op("Transpose", [k], { perm: [0, 1, 3, 2] })]),
    b.constant(0.125),
  ]);
  b.output("y", b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]));
  const kernels = fuse(b.build()).kernels;
  const rows = kernels.map((k) => rowCount(k));
  const [chain] = chainsOf(kernels, rows, () => true);
  assert.ok(chain, kernels.map((k) => `${k.name} ${k.group}`).join(", "));
  assert.equal(chain.rows, 2 * 4 * 64);
  assert.deepEqual(chain.per, [64, 1, 32]);
  assert.ok(chain.kernels.every((i) => kernels[i].group === kernels[chain.kernels[0]].group));
  // A share is whole pairs of each product's output rows (any rows of the softmax).
  assert.equal(chain.split.unit, 2);
  assert.deepEqual(chainsOf(kernels, rows, (i) => i !== chain.kernels[1]), [], "all or none");
});

Deno.test("a product split by B's panels takes pieces a thread; one split by rows one", () => {
  const few = product(128, 768, 3072), many = product(1024, 768, 768);
  const panels = (ks: typeof few) => ks.map(panelSplit);
  assert.equal(panels(few)[0], 3072 / 8, "128 rows split the 384 panels");
  assert.equal(panels(many)[0], 0, "1024 rows split by rows");
  const [byPanels] = splitsOf(few, panels(few)), [byRows] = splitsOf(many, panels(many));
  assert.deepEqual([byPanels.unit, byPanels.pieces], [1, 4]);
  assert.equal(byRows.pieces, 1, "each call of a row split streams all of B's panels");
});

Deno.test("a one-row block product's columns go to every thread in shares of four", () => {
  // A 0.5B decoder's down projection: 896 columns on 16 threads, 56 each (shares of 16 made 14
  // pieces of 64, two threads idle).
  const { graph } = blockProduct([1], [4864, 896, 4, 32], true);
  const kernels = fuse(graph, { blockProducts: true }).kernels;
  const i = kernels.findIndex((k) => k.blockProduct);
  const split = splitsOf(kernels, kernels.map(() => 0))[i];
  assert.equal(split.unit, 4);
  assert.ok(split.parts! >= 16);
  assert.deepEqual(piecesOf(rowCount(kernels[i]), 16 * (split.pieces ?? 1), split.unit), [56, 16]);
});

Deno.test("a cache stored over its past counts a test an entry, not a point, and stays on one thread", () => {
  // A decode step's present cache: the past but for the entry at `valid` (2 heads, 256 slots, 64
  // channels), stored over the donated past; the generator tests each entry once.
  const [heads, slots, width] = [2, 256, 64];
  const b = new GraphBuilder();
  const past = b.input("past", [1, heads, slots, width]);
  const fresh = b.input("fresh", [1, heads, 1, width]);
  const valid = b.op("Reshape", [b.input("valid", [1], "i32")], { shape: [1, 1, 1, 1] });
  const at = b.constant(Int32Array.from({ length: slots }, (_, j) => j), [1, 1, slots, 1], "i32");
  const wide = b.op("Expand", [fresh], { shape: [1, heads, slots, width] });
  b.output("present", b.op("Where", [b.op("Less", [at, valid]), past, wide]));
  const graph = b.build();
  const present = graph.outputs[0].value;
  const kernels = inPlaceKernels(
    fuse(graph).kernels,
    new Set([graph.inputs[0].value]),
    new Set([present]),
  );
  const k = kernels.find((x) => x.outputs.some((o) => o.value === present))!;
  assert.ok(k.inPlace?.length);
  assert.equal(workOf({ ...k, inPlace: undefined }) / workOf(k), width);
  assert.ok(threadable({ ...k, inPlace: undefined }) && !threadable(k));
  // A condition that moves along the channels (its slot read one further a channel) is tested
  // at every point.
  const [c, x, y] = (k.outputs[0].expr as Extract<Expr, { kind: "alu" }>).args;
  const along = (e: Expr): Expr =>
    e.kind === "load" && e.steps[0]?.kind === "affine"
      ? {
        ...e,
        steps: [{ ...e.steps[0], coeff: e.steps[0].coeff.map((r) => [...r.slice(0, 3), 1]) }],
      }
      : e.kind === "alu"
      ? { ...e, args: e.args.map(along) }
      : e;
  const expr: Expr = { kind: "alu", op: "Where", args: [along(c), x, y], dtype: "f32" };
  const moving = { ...k, outputs: [{ ...k.outputs[0], expr }] };
  assert.equal(workOf(moving), workOf({ ...moving, inPlace: undefined }));
});

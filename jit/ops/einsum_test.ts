import assert from "node:assert/strict";
import { compile, GraphBuilder } from "../../mod.ts";
import { KilnError } from "../support/errors.ts";
import { uniform } from "../support/random.ts";
import { type EinsumPlan, einsumPlan } from "./einsum.ts";

Deno.test("an Einsum equation is read against its operands, the implicit output included", () => {
  const plan = einsumPlan("...ij, kj", [[5, 2, 3], [4, 3]]) as EinsumPlan;
  assert.equal(typeof plan, "object");
  // The ellipsis first, then the letters used once, alphabetically.
  assert.deepEqual(plan.output.map((l) => plan.extent.get(l)), [5, 2, 4]);
  assert.equal(plan.output.length, 3);
  assert.equal(einsumPlan("ij,jk->ik", [[2, 3], [4, 5]]), "gives j the extents 3 and 4");
  assert.equal(einsumPlan("ii->i", [[2, 3]]), "gives i the extents 2 and 3");
  assert.equal(einsumPlan("ij->iz", [[2, 3]]), "has an output letter no operand has");
  assert.equal(einsumPlan("ij->ii", [[2, 2]]), "repeats an output letter");
  assert.equal(einsumPlan("ij,jk", [[2, 3]]), "names 2 operands for 1");
  assert.equal(einsumPlan("i1", [[2, 3]]), "has a bad character");
});

Deno.test("an Einsum the operands do not fit is a typed error that says how to write one", () => {
  const b = new GraphBuilder();
  const y = b.op("Einsum", [b.input("a", [2, 3]), b.input("b", [4, 5])], { equation: "ij,jk->ik" });
  assert.throws(
    () => b.output("y", y).build(),
    (e) => e instanceof KilnError && e.code === "bad-attribute" && /ab,bc->ac/.test(e.message),
  );
});

Deno.test("a two-operand contraction runs as a tiled matmul; other equations as a reduction", async () => {
  const run = async (equation: string, a: number[], b: number[]) => {
    const g = new GraphBuilder();
    const y = g.op("Einsum", [g.input("a", a), g.input("b", b)], { equation });
    const graph = g.output("y", y).build();
    const feeds = {
      a: { data: uniform(a.reduce((p, d) => p * d), 80), shape: a, dtype: "f32" as const },
      b: { data: uniform(b.reduce((p, d) => p * d), 81), shape: b, dtype: "f32" as const },
    };
    const want = await (await compile(graph, { backend: "reference", fuse: false })).run(feeds);
    const patterns: string[][] = [];
    for (const backend of ["wasm", "webgpu"]) {
      const exe = await compile(graph, { backend, cache: false });
      patterns.push(exe.plan!.kernels.map((k) => k.pattern));
      const got = (await exe.run(feeds)).y.data as Float32Array;
      const ref = want.y.data as Float32Array;
      assert.ok(got.every((v, i) => Math.abs(v - ref[i]) <= 1e-5), `${equation} on ${backend}`);
      exe.dispose();
    }
    return patterns;
  };
  // Attention's scores: one matmul kernel (as a broadcast product and a sum, a reduction
  // kernel: 4.6 ms on one wasm thread against 1.2 for `bik,bjk->bij` at 8 × 128 × 256 × 64).
  for (const kinds of await run("bhqd,bhkd->bhqk", [1, 2, 16, 8], [1, 2, 12, 8])) {
    assert.ok(kinds.includes("matmul"), kinds.join());
    assert.ok(!kinds.includes("reduce"), kinds.join());
  }
  // A letter summed in one operand only is no product: the reduction form stays.
  for (const kinds of await run("ij,jk->i", [4, 6], [6, 5])) {
    assert.ok(!kinds.includes("matmul"), kinds.join());
  }
});

Deno.test("attention written with Einsum reaches the attention kernels, as its MatMul form does", async () => {
  const [b, h, t, d] = [1, 2, 16, 8];
  const g = new GraphBuilder();
  const [q, k, v] = ["q", "k", "v"].map((n) => g.input(n, [b, h, t, d]));
  const scores = g.op("Einsum", [q, k], { equation: "bhqd,bhkd->bhqk" });
  const p = g.op("Softmax", [g.op("Mul", [scores, g.constant(0.25)])], { axis: -1 });
  const graph = g.output("y", g.op("Einsum", [p, v], { equation: "bhqk,bhkd->bhqd" })).build();
  const tensor = (seed: number) => ({
    data: uniform(b * h * t * d, seed),
    shape: [b, h, t, d],
    dtype: "f32" as const,
  });
  const feeds = { q: tensor(90), k: tensor(91), v: tensor(92) };
  const want = await (await compile(graph, { backend: "reference", fuse: false })).run(feeds);
  const exe = await compile(graph, { backend: "webgpu", cache: false });
  const groups = exe.plan!.kernels.map((x) => x.group ?? x.pattern);
  assert.ok(groups.every((x) => x.startsWith("attention")), groups.join());
  const got = (await exe.run(feeds)).y.data as Float32Array;
  assert.ok(got.every((x, i) => Math.abs(x - (want.y.data as Float32Array)[i]) <= 1e-5));
  exe.dispose();
});

import assert from "node:assert/strict";
import { compile, GraphBuilder } from "../../mod.ts";
import { erf as exactErf } from "../../backends/reference/scalar_math.ts";
import { type Expr, walk } from "../ir/kernel_ir.ts";
import { fuse } from "./fuse.ts";
import { withDefaults } from "./fuse_options.ts";

/** `op` of f32 `values` under the exact precision on the reference backend. */
async function exactly(op: string, values: number[], power?: number): Promise<Float32Array> {
  const b = new GraphBuilder();
  const x = b.input("x", [values.length]);
  b.output("y", b.op(op, power === undefined ? [x] : [x, b.constant(power)]));
  await using exe = await compile(b.build(), {
    backend: "reference",
    precision: "exact",
    cache: false,
  });
  const data = new Float32Array(values);
  return (await exe.run({ x: { data, shape: [values.length], dtype: "f32" } })).y
    .data as Float32Array;
}

/** `count` f32 points spread over [lo, hi]. */
const spread = (lo: number, hi: number, count: number) =>
  [...Array(count).keys()].map((i) => Math.fround(lo + (hi - lo) * (i + 0.37) / count));

/** The largest error of `got` against `want` at `xs`: relative, or absolute below `floor`. */
function worst(xs: number[], got: Float32Array, want: (x: number) => number, floor = 0): number {
  return Math.max(
    ...xs.map((x, i) => Math.abs(got[i] - want(x)) / Math.max(Math.abs(want(x)), floor)),
  );
}

Deno.test("exact math: the decompositions are as accurate as f32 allows", async () => {
  const wide = spread(-87, 88, 4000);
  assert.ok(worst(wide, await exactly("Exp", wide), Math.exp) < 1.5e-7);
  const positive = [...spread(1e-6, 10, 2000), ...spread(10, 1e30, 2000), 1e-40, 3e-39];
  assert.ok(worst(positive, await exactly("Log", positive), Math.log, 1) < 1.5e-7);
  const erfs = spread(-5, 5, 4000);
  const erf = await exactly("Erf", erfs);
  // Against erf's f64 value (to 1e-15) from the reference's scalar library.
  assert.ok(worst(erfs, erf, exactErf, 1e-3) < 3e-7);
  // sin and cos: absolute error (their zeros make relative error meaningless), up to 8192.
  const angles = spread(-8192, 8192, 8000);
  assert.ok(worst(angles, await exactly("Sin", angles), Math.sin, 1) < 1.5e-7);
  assert.ok(worst(angles, await exactly("Cos", angles), Math.cos, 1) < 1.5e-7);
  const bases = spread(0.01, 40, 2000);
  assert.ok(worst(bases, await exactly("Pow", bases, 2.5), (x) => x ** 2.5) < 2e-6);
  assert.ok(worst(bases, await exactly("Pow", bases, 3), (x) => x ** 3) < 2e-7);
});

Deno.test("exact math: C's special values", async () => {
  const same = (got: Float32Array, want: number[]) =>
    assert.deepEqual(
      [...got].map((v) => Object.is(v, -0) ? "-0" : v),
      want.map((v) => Object.is(v, -0) ? "-0" : v),
    );
  same(await exactly("Exp", [NaN, Infinity, -Infinity, 0, 89, -104]), [
    NaN,
    Infinity,
    0,
    1,
    Infinity,
    0,
  ]);
  same(await exactly("Log", [NaN, -1, 0, -0, Infinity, 1]), [
    NaN,
    NaN,
    -Infinity,
    -Infinity,
    Infinity,
    0,
  ]);
  same(await exactly("Erf", [NaN, Infinity, -Infinity, -0, 4]), [NaN, 1, -1, -0, 1]);
  same(await exactly("Sin", [NaN, Infinity, -0]), [NaN, NaN, -0]);
  same(await exactly("Cos", [NaN, -Infinity, 0]), [NaN, NaN, 1]);
  same(await exactly("Pow", [NaN, -0, -8, 0], -3), [
    NaN,
    -Infinity,
    Math.fround(-1 / 512),
    Infinity,
  ]);
  same(await exactly("Pow", [-0, -Infinity, -4, 1], 0.5), [0, Infinity, NaN, 1]);
  same(await exactly("Pow", [NaN, Infinity], 0), [1, 1]);
});

Deno.test("exact math: kernels are marked, decomposed and never grouped", () => {
  // Attention (scores → softmax → values) forms a group only outside the exact precision.
  const b = new GraphBuilder();
  const [q, k, v] = ["q", "k", "v"].map((n) => b.input(n, [2, 16, 8]));
  const scores = b.op("MatMul", [q, b.op("Transpose", [k], { perm: [0, 2, 1] })]);
  const att = b.op("MatMul", [b.op("Softmax", [scores], { axis: -1 }), v]);
  b.output("y", b.op("Add", [b.op("Sin", [att]), b.op("Pow", [att, b.constant(1.5)])]));
  const graph = b.build();
  assert.ok(fuse(graph).kernels.some((x) => x.group !== undefined));
  const kernels = fuse(graph, { exact: true }).kernels;
  assert.ok(kernels.every((x) => x.exact === true && x.group === undefined));
  const ops = new Set<string>();
  const visit = (e: Expr) => walk(e, (n) => n.kind === "alu" && ops.add(n.op));
  for (const x of kernels) [...x.reductions, ...x.outputs].forEach((r) => visit(r.expr));
  for (const op of ["Exp", "Sin", "Pow", "Log"]) assert.ok(!ops.has(op), op);
  assert.ok(ops.has("Bitcast") && ops.has("Floor"));
  // The options that would change a sum's order are off.
  const opts = withDefaults({ exact: true, splitSums: true, blockProducts: true, patchesFrom: 1 });
  assert.deepEqual(
    [opts.splitSums, opts.blockProducts, opts.blockPrologues, opts.patchesFrom],
    [false, false, false, Infinity],
  );
});

/**
 * MatMulInteger's and ConvInteger's zero points are checked as their products line them up: a
 * wrong dtype or a shape they cannot broadcast is a typed error saying what to give instead.
 *
 * @module
 */
import assert from "node:assert/strict";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { KilnError } from "../support/errors.ts";
import "./mod.ts";

/** The graph of a u8 [4, 8] by i8 [8, 3] MatMulInteger with `zeros` (a's, b's), flagged. */
function matmul(zeros: { a?: [number[], "u8" | "f32"]; b?: [number[], "i8" | "u8"] }) {
  const g = new GraphBuilder();
  const ins = [g.input("a", [4, 8], "u8"), g.input("b", [8, 3], "i8")];
  if (zeros.a) ins.push(g.input("az", zeros.a[0], zeros.a[1]));
  if (zeros.b) ins.push(g.input("bz", zeros.b[0], zeros.b[1]));
  const y = g.op("MatMulInteger", ins, { a_zero: zeros.a ? 1 : 0, b_zero: zeros.b ? 1 : 0 });
  return g.output("y", y).build();
}

const refused = (code: string, says: RegExp) => (e: unknown) =>
  e instanceof KilnError && e.code === code && says.test(e.message) && /Fix:/.test(e.message);

Deno.test("MatMulInteger's zero points: one value, one per row of a or column of b, of the operand's dtype", () => {
  // Scalars, a per-row zero point of a (M = 4) and a per-column one of b (N = 3) are accepted.
  matmul({ a: [[], "u8"], b: [[1], "i8"] });
  matmul({ a: [[4], "u8"], b: [[3], "i8"] });
  assert.throws(
    () => matmul({ a: [[], "f32"] }),
    refused("dtype-mismatch", /input 2 has dtype f32/),
  );
  assert.throws(() => matmul({ b: [[3], "u8"] }), refused("dtype-mismatch", /takes i8/));
  assert.throws(
    () => matmul({ a: [[3], "u8"] }),
    refused("shape-mismatch", /zero point 2 has shape \[3\].*one value or 4 \(one per row of a\)/),
  );
  assert.throws(
    () => matmul({ b: [[2, 3], "i8"] }),
    refused("shape-mismatch", /one value or 3 \(one per column of b\)/),
  );
});

Deno.test("ConvInteger's zero points: one for the input, one or one per output channel for the weights", () => {
  const conv = (xz: number[], wz: number[]) => {
    const g = new GraphBuilder();
    const ins = [g.input("x", [1, 2, 5, 5], "u8"), g.input("w", [6, 2, 3, 3], "u8")];
    const y = g.op("ConvInteger", [...ins, g.input("xz", xz, "u8"), g.input("wz", wz, "u8")], {
      a_zero: 1,
      b_zero: 1,
    });
    g.output("y", y).build();
  };
  conv([], [6]);
  conv([1], []);
  assert.throws(() => conv([2], []), refused("shape-mismatch", /one value or 1 \(one per row/));
  assert.throws(() => conv([], [2]), refused("shape-mismatch", /one value or 6/));
});

import assert from "node:assert/strict";
import type { Expr } from "../../jit/ir/kernel_ir.ts";
import { tileMask } from "./masks.ts";

const dot: Expr = { kind: "acc", index: 0, dtype: "f32" };
const load = (input: number, dtype: "f32" | "bool" | "f16" = "f32"): Expr => ({
  kind: "load",
  input,
  steps: [],
  dtype,
});
const num = (value: number): Expr => ({ kind: "const", value, dtype: "f32" });
const alu = (op: "Add" | "Sub" | "Mul" | "Div" | "Where" | "Exp" | "Neg", ...args: Expr[]) =>
  ({ kind: "alu", op, args, dtype: op === "Where" ? args[1].dtype : args[0].dtype }) as Expr;
/** The condition as WGSL, each dot-free value named by its input (`m1`) or literal. */
const wgsl = (e: Expr) =>
  tileMask(e)?.masked((x) =>
    x.kind === "load" ? `m${x.input}` : `${(x as { value: number }).value}`
  );

Deno.test("a mask added to the scaled dot masks where it is −∞, bounding the dot by its scale", () => {
  const scaled = alu("Add", alu("Mul", num(0.125), alu("Div", dot, num(-2))), load(2));
  assert.equal(tileMask(scaled)?.factor, 0.0625);
  assert.equal(wgsl(scaled), "((bitcast<u32>(m2) == 0xff800000u) & true)");
  // Subtracted from, or scaled after by a positive value, −∞ stays −∞.
  const after = alu("Div", alu("Sub", load(2), dot), load(3));
  assert.equal(
    wgsl(after),
    "(((bitcast<u32>(m2) == 0xff800000u) & true) & (bitcast<u32>(m3) - 1u < 0x7f7fffffu))",
  );
  assert.equal(tileMask(after)?.factor, 1);
});

Deno.test("a selection of −∞ masks whatever the dot, with no bound", () => {
  const selected = alu("Where", load(2, "bool"), dot, num(-Infinity));
  assert.equal(tileMask(selected)?.factor, undefined);
  assert.equal(
    wgsl(selected),
    "(((m2 != 0u) & false) | (!(m2 != 0u) & true))",
  );
});

Deno.test("scores the dot reaches otherwise, or not f32, skip nothing", () => {
  for (
    const e of [
      dot,
      alu("Add", dot, num(1)), // never −∞
      alu("Add", alu("Exp", dot), load(2)), // exp(dot) is not bounded by the dot
      alu("Mul", dot, load(2)), // a loaded factor: no bound
      alu("Where", alu("Add", dot, num(0)), num(-Infinity), dot), // the condition reads the dot
      alu("Add", dot, load(2, "f16")),
    ]
  ) {
    assert.equal(tileMask(e), undefined, JSON.stringify(e));
  }
});

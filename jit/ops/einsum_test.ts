import assert from "node:assert/strict";
import { GraphBuilder } from "../frontend/graph_builder.ts";
import { KilnError } from "../support/errors.ts";
import { type EinsumPlan, einsumPlan } from "./einsum.ts";
import "./mod.ts";

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
